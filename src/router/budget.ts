// Budgets of client keys and their teams, reserved when a request is admitted and settled when it
// ends: tokens (prompt and completion) and GPU-seconds (gpu-time.ts) per period, a UTC day, a
// week from Monday 00:00 UTC, or a calendar month (the default). A key is held to its own budget
// and to its team's, shared by the team's keys.
//
// A request of a budgeted key reserves, before anything is sent, its prompt (promptEstimate of
// its body's size) plus its most output (max_tokens, max_completion_tokens or max_output_tokens;
// DEFAULT_MAX_OUTPUT when it names none on a generating path, none on the others), and for a
// GPU-hour budget the mean GPU-seconds of the key's (else the team's) requests on this router,
// DEFAULT_GPU_SECONDS before it has any. It is refused (429 insufficient_quota) when the period's
// spend + what requests in flight reserved + its own reservation passes the budget. At its end
// its reservation goes back and what it used (the engine's usage, or what a cut stream streamed;
// its GPU-seconds) is added to the spend; a request that never reached an engine used nothing.
//
// The bound: admission keeps spend + reserved ≤ budget, so on one router the spend passes the
// budget by at most what the requests then in flight used beyond what they reserved: a prompt
// counted by the engine above its size's estimate (text of about one token per byte or more, as
// CJK can be), or output past the reservation of a request that named no max and wrote more than
// DEFAULT_MAX_OUTPUT; for GPU-hours, what requests in flight ran beyond the mean they reserved
// (a request's GPU time is known only at its end). With requests that name max_tokens, a token
// budget's spend never passes the budget however many arrive at once. With several routers
// (several control planes on one store) each sees the others' spend only as the store holds it,
// read once a tick: each may also admit up to the whole remaining budget in that tick.
//
// The spend is what the store's usage ledger holds of the period (BudgetSpent, sent by the
// control plane after it wrote the router's rows) + what this router counted since: per ledger
// take (taken(), numbered), what each account counted is kept until the control plane says its
// store read includes that take (BudgetSpent.through), so nothing is counted twice or lost. At a
// period's turn the store's figure and what this router counted are dropped (what a request
// counted just before the turn belongs to the period that ended).
//
// Until the control plane's first figures come (a router just started), a budgeted key's requests
// are answered 503 with Retry-After: 1, not admitted against a spend the router does not know.
//
// The check is O(1); the reservation (an object per request of a budgeted key) is what the
// request's exchange releases at its end whatever happened.

import type { Scheduler } from "../lib/scheduler";
import { type BudgetPeriod, PERIOD_INDEX, periodEnd, periodStart } from "../protocol/budget-periods";
import type { ApiKeyEntry, BudgetSpent, LimitUseEntry, UsageLimits } from "../protocol/routing";
import { promptEstimate } from "./admission";
import { type Reply, openAIError } from "./errors";

/** The most output a request on a generating path reserves when it names no max: tokens. */
export const DEFAULT_MAX_OUTPUT = 4096;
/** GPU-seconds a request reserves before its key (or team) has a request measured on this router. */
export const DEFAULT_GPU_SECONDS = 1;
/** The weight of the newest request in a key's mean GPU-seconds (an exponential mean). */
const MEAN_WEIGHT = 0.2;
/** The paths whose answers are generated tokens: their reservation counts output. */
const GENERATING = new Set(["/v1/chat/completions", "/v1/completions", "/v1/responses"]);

/**
 * What a request reserves of a token budget: its prompt (estimated from its body's size) and the
 * most output its body names (BodyFacts.maxOutput, read when the body was parsed), or the default.
 */
export function tokenReservation(path: string, bodyBytes: number, maxOutput: number | undefined): number {
  const prompt = promptEstimate(bodyBytes);
  if (!GENERATING.has(path)) return prompt;
  return prompt + (maxOutput !== undefined ? maxOutput : DEFAULT_MAX_OUTPUT);
}

/** A ledger take's counts of one account, kept until the store's figure includes them. */
interface Taken {
  gen: number;
  tokens: number;
  gpu: number;
}

/** One key's or team's budget on this router: its limits, the store's figure, what was counted here since, what is reserved. */
export class Account {
  tokenBudget: number | undefined = undefined;
  /** In GPU-seconds. */
  gpuBudget: number | undefined = undefined;
  period: BudgetPeriod = "month";
  /** The store's figure of the period (BudgetSpent), and the period's start it is for. */
  storeTokens = 0;
  storeGpu = 0;
  storeFor = Number.NaN;
  /** Counted here since the last ledger take. */
  localTokens = 0;
  localGpu = 0;
  /** Counted here in takes the store's figure does not include yet, and their sums. */
  transit: Taken[] = [];
  transitTokens = 0;
  transitGpu = 0;
  reservedTokens = 0;
  reservedGpu = 0;
  /** Mean GPU-seconds of its requests that reached a replica; NaN before one did. */
  gpuMean = Number.NaN;
  /** The period the counts are for: [from, until). */
  from = Number.NaN;
  until = Number.NEGATIVE_INFINITY;

  constructor(
    readonly kind: "key" | "team",
    readonly name: string,
  ) {}

  apply(l: UsageLimits | undefined): void {
    this.tokenBudget = l?.budgetTokens !== undefined && l.budgetTokens > 0 ? l.budgetTokens : undefined;
    this.gpuBudget = l?.budgetGpuHours !== undefined && l.budgetGpuHours > 0 ? l.budgetGpuHours * 3600 : undefined;
    const p = l?.budgetPeriod ?? "month";
    if (p !== this.period) {
      this.period = p;
      this.until = Number.NEGATIVE_INFINITY;
    }
  }

  /** Moves to the period holding `now` when it turned: the last one's counts go. */
  roll(now: number): void {
    if (now < this.until) return;
    this.from = periodStart(now, this.period);
    this.until = periodEnd(now, this.period);
    this.localTokens = this.localGpu = this.transitTokens = this.transitGpu = 0;
    this.transit = [];
    if (this.storeFor !== this.from) this.storeTokens = this.storeGpu = 0;
  }

  spentTokens(): number {
    return this.storeTokens + this.transitTokens + this.localTokens;
  }

  spentGpu(): number {
    return this.storeGpu + this.transitGpu + this.localGpu;
  }

  /** A request's use, counted here. */
  count(tokens: number, gpu: number): void {
    this.localTokens += tokens;
    this.localGpu += gpu;
    if (gpu > 0) this.gpuMean = Number.isNaN(this.gpuMean) ? gpu : this.gpuMean + MEAN_WEIGHT * (gpu - this.gpuMean);
  }

  /** A ledger take: what was counted since the last one goes with it (numbered `gen`). */
  taken(gen: number): void {
    if (this.localTokens === 0 && this.localGpu === 0) return;
    this.transit.push({ gen, tokens: this.localTokens, gpu: this.localGpu });
    this.transitTokens += this.localTokens;
    this.transitGpu += this.localGpu;
    this.localTokens = this.localGpu = 0;
  }

  /** The store's figure for the period starting `start`, read with every take up to `through`. */
  stored(start: number, tokens: number, gpu: number, through: number): void {
    if (start !== this.from) return;
    this.storeFor = start;
    this.storeTokens = tokens;
    this.storeGpu = gpu;
    let i = 0;
    while (i < this.transit.length && this.transit[i]!.gen <= through) {
      this.transitTokens -= this.transit[i]!.tokens;
      this.transitGpu -= this.transit[i]!.gpu;
      i++;
    }
    if (i > 0) this.transit = this.transit.slice(i);
  }
}

/**
 * What one request reserved of its key's and its team's budgets. Settled once, where the request
 * ends (proxy.ts), with what it used; released by its exchange at the end whatever happened (one
 * never settled used nothing), which also releases what it holds beside (`inner`: its limits' slot).
 */
export class Reservation {
  private open = true;

  constructor(
    readonly key: Account | undefined,
    readonly team: Account | undefined,
    readonly tokens: number,
    readonly gpu: number,
  ) {}

  /** What its exchange holds beside (its limits' slot), released with it. */
  inner: { release(): void } | undefined = undefined;

  /** The request's end: its reservation goes back and what it used counts. */
  settle(tokens: number, gpu: number): void {
    if (!this.open) return;
    this.open = false;
    for (const a of [this.key, this.team]) {
      if (a === undefined) continue;
      a.reservedTokens -= this.tokens;
      a.reservedGpu -= this.gpu;
      a.count(tokens, gpu);
    }
  }

  /** The exchange's end: whatever was not settled used nothing. */
  release(): void {
    this.settle(0, 0);
    this.inner?.release();
  }
}

/** A budgeted key's accounts: its own and its team's, either absent when it has no budget. */
export interface Budgeted {
  readonly key: Account | undefined;
  readonly team: Account | undefined;
}

/** A key's or team's budget use, for `llmgw keys list` and `teams list`. */
export interface BudgetUse {
  of: "key" | "team";
  name: string;
  period: BudgetPeriod;
  tokens?: { budget: number; spent: number; reserved: number };
  gpuHours?: { budget: number; spent: number; reserved: number };
}

export class Budget {
  /** By the key's SHA-256: only keys with a budget of their own or of their team. */
  private byKey = new Map<string, Budgeted>();
  private keys = new Map<string, Account>();
  private teams = new Map<string, Account>();
  /**
   * The latest ledger take's number: each take's counts are numbered with it. Counted from the
   * router's start time (ms), so a restarted router thread numbers its takes after its
   * predecessor's (one a tick, far fewer than a ms each): a figure read with the old thread's
   * takes never covers the new one's.
   */
  private takes: number;
  /**
   * The control plane has sent the store's figures once: before, a budgeted key's spend in the
   * store is unknown (a router just started), and its requests are asked to come back in a second
   * rather than admitted against a spend of 0.
   */
  private known = false;

  constructor(private readonly time: Pick<Scheduler, "now">) {
    this.takes = Math.floor(time.now());
  }

  /** The keys the control plane published: accounts for the budgeted ones, kept (with their counts) for those that stay. */
  setKeys(entries: readonly ApiKeyEntry[]): void {
    const keys = new Map<string, Account>();
    const teams = new Map<string, Account>();
    const byKey = new Map<string, Budgeted>();
    for (const e of entries) {
      let team: Account | undefined;
      if (e.team !== undefined && budgeted(e.teamLimits)) {
        team = teams.get(e.team);
        if (team === undefined) {
          team = this.teams.get(e.team) ?? new Account("team", e.team);
          team.apply(e.teamLimits);
          teams.set(e.team, team);
        }
      }
      let key: Account | undefined;
      if (budgeted(e.limits)) {
        key = this.keys.get(e.name) ?? new Account("key", e.name);
        key.apply(e.limits);
        keys.set(e.name, key);
      }
      if (key !== undefined || team !== undefined) byKey.set(e.sha256, { key, team });
    }
    this.keys = keys;
    this.teams = teams;
    this.byKey = byKey;
  }

  /** The budgets of a key (by its SHA-256), or undefined for a key without any. */
  of(sha256: string): Budgeted | undefined {
    return this.byKey.size === 0 ? undefined : this.byKey.get(sha256);
  }

  /**
   * Reserves `tokens` (tokenReservation) and an estimate of GPU-seconds for a request of a
   * budgeted key, or answers the refusal when a budget cannot hold it.
   */
  reserve(b: Budgeted, tokens: number): Reservation | Reply {
    if (!this.known) return unknownReply(b);
    const now = this.time.now();
    const { key, team } = b;
    key?.roll(now);
    team?.roll(now);
    const metersGpu = key?.gpuBudget !== undefined || team?.gpuBudget !== undefined;
    const mean = key !== undefined && !Number.isNaN(key.gpuMean) ? key.gpuMean : team !== undefined && !Number.isNaN(team.gpuMean) ? team.gpuMean : DEFAULT_GPU_SECONDS;
    const gpu = metersGpu ? mean : 0;
    const no = (key !== undefined ? refusal(key, tokens, gpu) : undefined) ?? (team !== undefined ? refusal(team, tokens, gpu) : undefined);
    if (no !== undefined) return no;
    for (const a of [key, team]) {
      if (a === undefined) continue;
      a.reservedTokens += tokens;
      a.reservedGpu += gpu;
    }
    return new Reservation(key, team, tokens, gpu);
  }

  /** The ledger's rows were taken (Router.takeLedger): what was counted since the last take goes with them. Returns the take's number. */
  taken(): number {
    const gen = ++this.takes;
    for (const a of this.keys.values()) a.taken(gen);
    for (const a of this.teams.values()) a.taken(gen);
    return gen;
  }

  /** The number of the latest take (UsageSource.ledgerGen). */
  get gen(): number {
    return this.takes;
  }

  /** The store's figures, read by the control plane with the takes up to `through`. */
  setSpent(s: BudgetSpent): void {
    this.known = true;
    const now = this.time.now();
    const apply = (accounts: ReadonlyMap<string, Account>, figures: BudgetSpent["keys"]) => {
      for (const f of figures) {
        const a = accounts.get(f.name);
        if (a === undefined) continue;
        a.roll(now);
        const i = PERIOD_INDEX[a.period];
        a.stored(s.starts[i], f.tokens[i], f.gpu_seconds[i], s.through);
      }
    };
    apply(this.keys, s.keys);
    apply(this.teams, s.teams);
  }

  /** Each budgeted key's and team's spend and reservations of its period now. */
  use(): BudgetUse[] {
    const now = this.time.now();
    const out: BudgetUse[] = [];
    const one = (a: Account) => {
      a.roll(now);
      out.push({
        of: a.kind,
        name: a.name,
        period: a.period,
        ...(a.tokenBudget !== undefined ? { tokens: { budget: a.tokenBudget, spent: a.spentTokens(), reserved: a.reservedTokens } } : {}),
        ...(a.gpuBudget !== undefined ? { gpuHours: { budget: a.gpuBudget / 3600, spent: a.spentGpu() / 3600, reserved: a.reservedGpu / 3600 } } : {}),
      });
    };
    for (const a of this.keys.values()) one(a);
    for (const a of this.teams.values()) one(a);
    return out;
  }
}

/**
 * The limits' use (admission.ts) with each budget's: what is spent of it this period and reserved
 * by requests in flight, for `keys list` and `teams list`. A key or team with a budget and no
 * other limit gets an entry of its own.
 */
export function withBudgetUse(limits: LimitUseEntry[], budgets: readonly BudgetUse[]): LimitUseEntry[] {
  for (const b of budgets) {
    let e = limits.find((l) => l.of === b.of && l.name === b.name);
    if (e === undefined) limits.push((e = { of: b.of, name: b.name, concurrent: 0 }));
    if (b.tokens !== undefined) e.budget_tokens = Math.round(b.tokens.spent + b.tokens.reserved);
    if (b.gpuHours !== undefined) e.budget_gpu_hours = Math.round((b.gpuHours.spent + b.gpuHours.reserved) * 10_000) / 10_000;
  }
  return limits;
}

function budgeted(l: UsageLimits | undefined): boolean {
  return l !== undefined && ((l.budgetTokens ?? 0) > 0 || (l.budgetGpuHours ?? 0) > 0);
}

/** The refusal of `a`'s budget for a request reserving `tokens` and `gpu` GPU-seconds, or undefined when it holds them. */
function refusal(a: Account, tokens: number, gpu: number): Reply | undefined {
  const t = a.tokenBudget;
  if (t !== undefined) {
    const spent = a.spentTokens();
    if (spent + a.reservedTokens + tokens > t) return spentReply(a, `${t} tokens`, "--budget-tokens N", `${Math.round(spent)} used and ${Math.round(a.reservedTokens)} reserved by requests in flight; this request reserves ${tokens} (its prompt and its most output)`);
  }
  const g = a.gpuBudget;
  if (g !== undefined && gpu > 0) {
    const spent = a.spentGpu();
    if (spent + a.reservedGpu + gpu > g) return spentReply(a, `${hours(g)} GPU-hours`, "--budget-gpu-hours H", `${hours(spent)} used and ${hours(a.reservedGpu)} reserved by requests in flight; this request reserves ${hours(gpu)}`);
  }
  return undefined;
}

/** A budgeted key's request before the store's figures came: 503, to retry in a second. */
function unknownReply(b: Budgeted): Reply {
  const a = (b.key ?? b.team)!;
  const whose = a.kind === "key" ? `key '${a.name}'` : `team '${a.name}'`;
  return openAIError(503, `The budget of ${whose} cannot be checked yet: the router has not had the period's spend from the control plane (it comes within a tick of a start); try again in a second.`, {
    code: "budget_unknown",
    headers: { "retry-after": "1", "x-should-retry": "true" },
  });
}

function hours(seconds: number): string {
  return String(Math.round((seconds / 3600) * 10_000) / 10_000);
}

/** A budget spent, as OpenAI answers it: 429 insufficient_quota, not to be retried. */
function spentReply(a: Account, budget: string, flag: string, what: string): Reply {
  const whose = a.kind === "key" ? `key '${a.name}'` : `team '${a.name}' (shared by its keys)`;
  const resets = new Date(a.until).toISOString();
  return openAIError(429, `Budget spent for ${whose}: ${budget} per ${a.period}, ${what}. It resets at ${resets}; ask for a larger budget (\`llmgw ${a.kind === "key" ? "keys" : "teams"} update ${a.name} ${flag}\`) or wait for it.`, {
    type: "insufficient_quota",
    code: "insufficient_quota",
    headers: { "x-should-retry": "false" },
  });
}
