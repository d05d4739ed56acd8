// Type declarations of the pgfence Node.js package (plain JavaScript in lib/), checked
// with `tsc -p tsconfig.json` against test/types.ts (tests/test_node_client.py runs it).
import type { Pool, PoolConfig, ClientBase, QueryResult } from "pg";

/** A job id (bigint): returned as its exact decimal string; accepted as a string, a safe integer or a BigInt. */
export type JobId = string;
export type JobIdInput = string | number | bigint;
/** A UUID as text. */
export type Uuid = string;
/** A duration: a number is milliseconds (5000 = 5 s); a string is PostgreSQL interval text ("30 seconds"). */
export type Duration = number | string;
/** Anything JSON.stringify serializes (the database checks what it may store). */
export type Json = unknown;
/** timestamptz: a Date, or text PostgreSQL reads. */
export type Timestamp = Date | string;

export const SCHEMA_VERSION: number;

export class PgfenceError extends Error {
  constructor(message: string, info?: { sqlstate?: string | null; detail?: string | null; hint?: string | null; cause?: unknown });
  readonly sqlstate: string | null;
  readonly detail: string | null;
  readonly hint: string | null;
}
/** PF001: the attempt token is no longer current; `detail` says why. */
export class LeaseLost extends PgfenceError {}
/** PF002 */
export class JobNotFound extends PgfenceError {}
/** PF003 */
export class InvalidTransition extends PgfenceError {}
/** PF004 */
export class WrongIsolation extends PgfenceError {}
/** 22023 / 22004 */
export class InvalidArgument extends PgfenceError {}
export class SchemaMismatch extends PgfenceError {}
/** The PgfenceError for a pg error, or null when it is not a pgfence condition. */
export function translate(err: unknown): PgfenceError | null;

/** JSON text sent as it is (the database checks it). */
export class RawJson {
  constructor(text: string);
  readonly text: string;
}

/** A claimed job: claim's row. */
export interface ClaimedJob {
  id: JobId;
  queue: string;
  kind: string;
  payload: any;
  attempts: number;
  max_attempts: number;
  attempt_token: Uuid;
  lease_expires_at: Date;
  /** Seconds the job had been runnable (since its available_at) when it was claimed, on the database's clock. */
  waited_s: number;
}
/** A job as a worker's handler sees it: frozen (the worker reports with its id and token); its payload is not. */
export interface Job extends Readonly<ClaimedJob> {
  /** Aborted when the lease is lost (reclaimed, cancelled, taken over, its run timeout passed) or the worker shuts down. */
  readonly signal: AbortSignal;
  /** The same, polled. */
  readonly shouldStop: () => boolean;
}
export interface Outcome { id: JobId; accepted: boolean; status: string | null; detail: string | null }
export interface HeartbeatOutcome extends Outcome { lease_expires_at: Date | null }
export interface Enqueued { ordinal: number; id: JobId; created: boolean }
export interface Reclaimed { id: JobId; status: string; reclaim_count: number }
export interface QueueStats { queue: string; status: string; jobs: number; oldest_runnable_age: unknown; expired_leases: number }
/** An interval as pg returns it (a PostgresInterval object: years, months, days, hours, minutes, seconds, milliseconds). */
export type IntervalValue = unknown;
export interface QueueLimit { queue: string; paused_at: Date | null; paused_by: string | null; max_running: number | null; running: number; limited_at: Date | null; limited_by: string | null; max_claims: number | null; claims_per: IntervalValue | null; claims_available: number | null; rate_limited_at: Date | null; rate_limited_by: string | null }
export interface QueueSet { queue_set: string; queue_count: number; names: string[]; defined_at: Date; defined_by: string }
export interface QueueTimeout { queue: string; timeout: IntervalValue; set_at: Date; set_by: string }
export interface Schedule { name: string; cron: string | null; every: IntervalValue | null; kind: string; payload: any; queue: string; priority: number; max_attempts: number; recovery_policy: string; time_zone: string; catch_up: "all" | "latest" | "none"; slot_key: string | null; paused_at: Date | null; paused_by: string | null; created_at: Date; created_by: string; next_fire_at: Date | null; last_fire_at: Date | null; last_slot: Date | null; last_job_id: JobId | null; last_error: string | null; last_error_at: Date | null }
export interface ScheduleOptions { cron?: string | null; kind?: string; payload?: Json | null; queue?: string; priority?: number; max_attempts?: number; recovery_policy?: "auto" | "manual"; time_zone?: string; catch_up?: "all" | "latest" | "none"; every?: Duration | null; replace?: boolean; slot_key?: string | null }
export interface HistoryMaintenance { created: number; dropped: number; truncated: number; moved: number; deleted: number }
export interface SweeperHealth { state: "running" | "paused" | "stopped" | "never_ran"; last_pass_at: Date | null; last_pass_age: unknown; paused_at: Date | null; paused_by: string | null; last_error: string | null; last_error_at: Date | null }
export interface JobRecord { id: JobId; queue: string; kind: string; status: string; payload: any; result: any; attempts: number; max_attempts: number; timeout: IntervalValue | null; unique_for: IntervalValue | null; [column: string]: any }
export interface AttemptRecord { attempt: number; attempt_token: Uuid; worker: string | null; claimed_at: Date; heartbeat_at: Date | null; lease_expires_at: Date | null; ended_at: Date | null; outcome: string; error: string | null }
export interface RejectionRecord { attempt_token: Uuid; operation: string; caller: string; detail: string | null; rejected_at: Date }
export interface WakeupTag { queue: string; tag: string }
export interface ActionResult { id: JobId; acted: boolean; job_status: string | null; detail: string | null }
export interface ActionPreview { jobs: number; max_jobs: number }
export interface ActionFilter { status?: string | null; queue?: string | null; kind?: string | null; error_contains?: string | null; updated_after?: Timestamp | null; updated_before?: Timestamp | null }
export interface AuditEntry { id: JobId; at: Date; db_role: string; login: string; actor: string | null; action: string; count: number; note: string | null; detail: any }
export interface Metric { name: string; type: string; help: string; labels: Record<string, string>; value: number }

export interface ConnectOptions {
  /** Named prepared statements (default true); false behind pgbouncer in transaction mode. */
  prepared?: boolean;
  /** Pool size (default 8). */
  max?: number;
  /** Check schema_version() (default true). */
  checkSchema?: boolean;
}

export class Client {
  constructor(target: { pool: Pool; prepared?: boolean } | { connection: ClientBase; prepared?: boolean });
  static connect(config?: string | PoolConfig, options?: ConnectOptions): Promise<Client>;
  readonly pool: Pool | null;
  readonly connection: ClientBase | null;
  readonly prepared: boolean;
  /** The same client on a caller's pg connection: calls join the caller's transaction. */
  using(connection: ClientBase): Client;
  close(): Promise<void>;
  query(text: string, values?: unknown[], name?: string): Promise<QueryResult<any>>;
  checkSchema(): Promise<number>;
  sweep(options?: { batch_size?: number }): Promise<number>;

  // producer
  enqueue(kind: string, payload?: Json | null, options?: { queue?: string; priority?: number; run_at?: Timestamp | null; max_attempts?: number; recovery_policy?: "auto" | "manual"; idempotency_key?: string | null; timeout?: Duration | null; unique_for?: Duration | null }): Promise<JobId>;
  enqueue_many(kinds: string[], payloads?: Json[] | null, options?: { queue?: string; priorities?: number[] | null; run_ats?: (Timestamp | null)[] | null; max_attempts?: number; recovery_policy?: "auto" | "manual"; idempotency_keys?: (string | null)[] | null; timeout?: Duration | null; unique_for?: Duration | null }): Promise<Enqueued[]>;
  // worker
  /** queues: null for every queue; or options.queue_set (with no queues): a set stored with define_queue_set. */
  claim(worker_id: string, queues?: string[] | null, options?: { lease?: Duration; max_jobs?: number; request_id?: Uuid | null; queue_set?: string | null }): Promise<ClaimedJob[]>;
  /** Store (or replace) a set of queues (1..10,000 names) for claim's queue_set; the number of distinct queues. */
  define_queue_set(queue_set: string, queues: string[]): Promise<number>;
  /** true when the set existed; claims naming it are refused (22023) afterwards. */
  drop_queue_set(queue_set: string): Promise<boolean>;
  queue_sets(): Promise<QueueSet[]>;
  claim_results(worker_id: string, request_ids: Uuid[], options?: { lease?: Duration }): Promise<ClaimedJob[]>;
  /** @deprecated the old name of claim_results */
  claimed(worker_id: string, request_ids: Uuid[], options?: { lease?: Duration }): Promise<ClaimedJob[]>;
  heartbeat(job_id: JobIdInput, attempt_token: Uuid, options?: { lease?: Duration }): Promise<Date>;
  heartbeat_many(job_ids: JobIdInput[], attempt_tokens: Uuid[], options?: { lease?: Duration }): Promise<HeartbeatOutcome[]>;
  complete(job_id: JobIdInput, attempt_token: Uuid, result?: Json | RawJson | null): Promise<void>;
  complete_many(job_ids: JobIdInput[], attempt_tokens: Uuid[], results?: (Json | RawJson | null)[] | null): Promise<Outcome[]>;
  fail(job_id: JobIdInput, attempt_token: Uuid, error: string, options?: { retry_in?: Duration | null; permanent?: boolean }): Promise<"queued" | "failed">;
  fail_many(job_ids: JobIdInput[], attempt_tokens: Uuid[], errors: string[], options?: { retry_ins?: (Duration | null)[] | null; permanents?: boolean[] | null }): Promise<Outcome[]>;
  release(job_id: JobIdInput, attempt_token: Uuid, options?: { started?: boolean }): Promise<string>;
  release_many(job_ids: JobIdInput[], attempt_tokens: Uuid[], options?: { started?: boolean }): Promise<Outcome[]>;
  /** Back to the queue after `delay` (more than 0, at most 365 days), the attempt recorded snoozed and not counted. */
  snooze(job_id: JobIdInput, attempt_token: Uuid, delay: Duration): Promise<"queued" | "failed">;
  snooze_many(job_ids: JobIdInput[], attempt_tokens: Uuid[], delays: Duration[]): Promise<Outcome[]>;
  report_rejection(job_id: JobIdInput, attempt_token: Uuid, operation: "heartbeat" | "complete" | "fail" | "release" | "snooze"): Promise<void>;
  wakeup_tags(queues: string[]): Promise<WakeupTag[]>;
  // operator
  reclaim_expired(options?: { max_jobs?: number }): Promise<Reclaimed[]>;
  requeue(job_id: JobIdInput, options?: { note?: string | null }): Promise<void>;
  cancel(job_id: JobIdInput, options?: { note?: string | null }): Promise<void>;
  // the operator console (audited)
  mark_done(job_id: JobIdInput, note: string, options?: { result?: Json }): Promise<void>;
  requeue_many(job_ids: JobIdInput[], options?: { note?: string | null }): Promise<ActionResult[]>;
  cancel_many(job_ids: JobIdInput[], options?: { note?: string | null }): Promise<ActionResult[]>;
  mark_done_many(job_ids: JobIdInput[], note: string, options?: { result?: Json }): Promise<ActionResult[]>;
  purge_many(job_ids: JobIdInput[], note: string): Promise<ActionResult[]>;
  preview_action(action: "requeue" | "cancel" | "mark_done" | "purge", options?: ActionFilter): Promise<ActionPreview>;
  act_on_filter(action: "requeue" | "cancel" | "mark_done" | "purge",
    options?: ActionFilter & { note?: string | null; result?: Json; max_jobs?: number }): Promise<ActionResult[]>;
  audit_of(job_id: JobIdInput): Promise<AuditEntry[]>;
  set_audit_retention(retain: Duration): Promise<void>;
  purge_audit(options?: { max_rows?: number }): Promise<number>;
  metrics(): Promise<Metric[]>;
  purge_finished(options?: { max_jobs?: number }): Promise<number>;
  set_retention(queue: string | null, retain_done: Duration, retain_failed: Duration): Promise<void>;
  pause_queue(queue: string): Promise<boolean>;
  resume_queue(queue: string): Promise<boolean>;
  set_queue_limit(queue: string, max_running: number | null): Promise<void>;
  set_queue_rate_limit(queue: string, max_claims: number | null, options?: { per?: Duration }): Promise<void>;
  queue_limits(): Promise<QueueLimit[]>;
  set_queue_timeout(queue: string, timeout: Duration | null): Promise<void>;
  queue_timeouts(): Promise<QueueTimeout[]>;
  // schedules
  /** Create (or, with replace, change) a schedule; returns its first slot. */
  schedule(name: string, options?: ScheduleOptions): Promise<Date>;
  unschedule(name: string): Promise<boolean>;
  pause_schedule(name: string): Promise<boolean>;
  resume_schedule(name: string): Promise<boolean>;
  schedules(): Promise<Schedule[]>;
  fire_schedules(options?: { max_slots?: number }): Promise<number>;
  cron_next(cron: string, options?: { after?: Timestamp; time_zone?: string }): Promise<Date | null>;
  // history
  maintain_history(): Promise<HistoryMaintenance>;
  set_history_partition_width(width: Duration): Promise<void>;
  pause_sweeper(): Promise<boolean>;
  resume_sweeper(): Promise<boolean>;
  sweeper_health(): Promise<SweeperHealth>;
  sweeper_last_pass(): Promise<Date | null>;
  stats(): Promise<QueueStats[]>;
  // read
  /** Throws JobNotFound when the job does not exist or this role may not see it. */
  job(job_id: JobIdInput): Promise<JobRecord>;
  attempts_of(job_id: JobIdInput): Promise<AttemptRecord[]>;
  rejections_of(job_id: JobIdInput): Promise<RejectionRecord[]>;
  rejections_not_stored(job_id: JobIdInput): Promise<number>;
  history_summary(options?: { since?: Duration }): Promise<Record<string, number>>;
  limits(): Promise<Record<string, number>>;
  schema_version(): Promise<number>;
}

/** Dead-letter the job now (no retry). */
export class PermanentFailure extends Error { constructor(message?: string) }
/** The handler stopped early (its signal aborted): give the job back with a fenced release. */
export class Interrupted extends Error { constructor(message?: string) }
/** Retry after `delay` (milliseconds, or interval text) instead of the default backoff. */
export class RetryAfter extends Error { constructor(delay: Duration, message?: string); readonly delay: Duration }
/** Run the job again after `delay` (milliseconds, or interval text; more than 0, at most 365 days), the attempt not counted (a fenced snooze). */
export class Snooze extends Error { constructor(delay: Duration, message?: string); readonly delay: Duration }

export type Handler = (job: Job) => unknown | Promise<unknown>;

export interface Logger { info(message: string): void; warn(message: string): void; error(message: string): void }

/** The Worker's options (durations in milliseconds); the constructor checks each (WorkerOptionError), and refuses an unknown name. */
export interface WorkerOptions {
  /** Queue names to claim from, 1..10,000 names of 1..128 characters (default: all). */
  queues?: readonly string[] | ReadonlySet<string> | null;
  /** Instead of queues: the name of a set of queues stored with define_queue_set. */
  queueSet?: string | null;
  /** Handlers running at once, an integer, 1 or more (default 8). */
  concurrency?: number;
  /** Extra jobs claimed ahead, an integer, 0 or more (default 0). */
  prefetch?: number;
  /** Lease per claim in milliseconds, 1..86,400,000 (default 30000); heartbeats every lease / 3. */
  lease?: number;
  /** Longest idle wait between claims, ms, 1..a day (default 1000; below 1 ms an idle worker would poll in a busy loop). */
  pollInterval?: number;
  /** How long a shutdown waits for running handlers, ms, 0..a day (default 30000). */
  shutdownGrace?: number;
  /** Outcomes are reported when flushBatch (1..10,000) wait or the oldest waited flushInterval ms (0..a day) (defaults 500, 5). */
  flushInterval?: number;
  flushBatch?: number;
  /** 1..128 characters (default: host:pid:random). */
  workerId?: string | null;
  /** LISTEN pgfence_enqueue (default true). */
  listen?: boolean;
  /** CALL pgfence.sweep() every sweepInterval ms (10..a day, default 1000): true, false, or null (default: while
   *  sweeper_health() says no background sweeper runs, looked at every minute). */
  runSweeper?: boolean | null;
  sweepInterval?: number;
  /** Stop gracefully on SIGTERM/SIGINT while run() runs (default true). */
  handleSignals?: boolean;
  /** Its info, warn and error methods, own or inherited (at least one; the others: the default's). */
  logger?: Partial<Logger>;
  /** Serve this worker's own Prometheus metrics at http://metricsBind:metricsPort/metrics while run() runs
   *  (default null: no metrics, no server; 0: any free port, read back from `metricsAddress`). */
  metricsPort?: number | null;
  /** The address the metrics are served on (default "127.0.0.1"; no authentication: bind beyond loopback only on a trusted network). */
  metricsBind?: string;
}

/**
 * A Worker option the worker cannot run with, thrown by the constructor before anything connects
 * or claims: `option` names it (or the unknown name; `queues[2]`, `handlers["kind"]`, `logger.warn`
 * for a part), `value` is what it got, `hint` what it takes. The message says all three, the value
 * written safely (control and invisible characters as \uXXXX). A TypeError, not a PgfenceError.
 */
export class WorkerOptionError extends TypeError {
  constructor(option: string, value: unknown, problem: string, hint: string);
  readonly option: string;
  readonly value: unknown;
  /** What is wrong with the value ("is out of range"), as the message says it. */
  readonly problem: string;
  /** What the option takes. */
  readonly hint: string;
}

/** The worker cannot serve /metrics: the address cannot be bound (the port is in use, say). run() rejects with it before anything is claimed. */
export class MetricsError extends Error {
  constructor(message: string, hint: string);
  /** What to do. */
  readonly hint: string;
}

export class Worker {
  constructor(client: Client, handlers: Record<string, Handler>, options?: WorkerOptions);
  readonly workerId: string;
  readonly counters: { claimed: number; completed: number; failed: number; lease_lost: number; released: number; snoozed: number };
  readonly metricsPort: number | null;
  readonly metricsBind: string;
  /** Where the metrics server listens while run() serves it (the port bound, when metricsPort is 0), else null. */
  readonly metricsAddress: { host: string; port: number } | null;
  /** Begin a graceful shutdown (what SIGTERM/SIGINT do). */
  stop(): void;
  /** Run until stop() or a signal; resolves once every outcome is reported and every job given back. */
  run(): Promise<void>;
}
