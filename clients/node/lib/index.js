"use strict";
// pgfence for Node.js: the Client (one method per SQL function) and the Worker.
// docs/node.md; the protocol every worker follows: docs/worker-protocol.md.

const { Client, RawJson, SCHEMA_VERSION } = require("./client");
const errors = require("./errors");
const { Worker } = require("./worker");
const { MetricsError } = require("./metrics");
const { WorkerOptionError } = require("./worker_options");
const { PermanentFailure, Interrupted, RetryAfter, Snooze } = require("./handlers");

module.exports = {
  Client, RawJson, SCHEMA_VERSION, Worker, PermanentFailure, Interrupted, RetryAfter, Snooze, MetricsError,
  WorkerOptionError,
  PgfenceError: errors.PgfenceError, LeaseLost: errors.LeaseLost, JobNotFound: errors.JobNotFound,
  InvalidTransition: errors.InvalidTransition, WrongIsolation: errors.WrongIsolation,
  InvalidArgument: errors.InvalidArgument, SchemaMismatch: errors.SchemaMismatch, translate: errors.translate,
};
