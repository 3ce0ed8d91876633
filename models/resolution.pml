/*
 * The confirmation resolution protocol of akchat-fsm, for SPIN (see models/README.md).
 *
 * NCLIENTS clients resolve NCONF confirmations that live in ONE session envelope held by a
 * compare-and-set register (the SessionStorage port).  A resolution is: load -> claim save
 * (CAS#1: approving / rejecting / expiring) -> upstream approve/deny -> terminal save (CAS#2).
 * A client may crash between any two of those steps; any save may end "outcome unknown" (applied
 * or not; the client settles it by re-reading, ADR-0066, with the per-write nonce of ADR-0062);
 * upstream may fail without acting, or act and lose its reply; the clock may pass expiresAt; a
 * reconciler settles processing records from the upstream tool-call status (ADR-0012): complete
 * when upstream acted, otherwise resume (re-issue the claimed call; safe with a live claimant)
 * or, only when the host knows the claimant is gone, release back to pending; a resume
 * first re-saves the unchanged claim (a fence, ADR-0054) and calls upstream only if it applied.
 *
 * With -DLEDGER the approved tool calls of the session's one agent run are executed by a run
 * continuation through the tool-execution ledger (ADR-0100): the continuation claims the run
 * record by CAS, claims each approved call's execution record by a create-only CAS (absent ->
 * executing), runs the body, records the result (executing -> executed) and completes the run;
 * it may crash after any of those steps, and a run reconciler re-claims a crashed continuation.
 *
 * The lifecycle itself (which event moves which status where) is NOT written here: it comes
 * from confirmation_table.pml, generated from the python-statemachine class.
 *
 * Options:  -DNO_RESUME   the reconciler only completes or releases orphaned records
 *           -DNO_RELEASE  the reconciler never releases (release_untouched=False, the default)
 *           -DINFLIGHT    an unknown save may still be travelling and land later
 *           -DANY_INTENT  every client may approve, reject or expire (else a fixed intent each)
 *           -DLEDGER      the run continuation and the tool-execution ledger (ADR-0100)
 *           -DAUDIT       each claim attempt first creates its audit entry, keyed by the
 *                         cursor it claims at (ADR-0132); a decider that finds the cursor
 *                         taken re-reads and fences it when it has not moved
 *           -DEDIT        (with -DLEDGER) client 1's approve is a reviewer's edit (ADR-0135);
 *                         the runtime may hand a body the model's arguments, which the
 *                         execution guard refuses
 *           -DSETTLE      operators settle an unknown execution, each attempt announced by
 *                         its create-only audit entry (ADR-0136); run with NCLIENTS=0
 * Seeded protocol bugs (each must produce a counterexample; see models/check.py):
 *   -DBUG_UPSTREAM_FIRST   call upstream before the claim is saved
 *   -DBUG_TERMINAL_FIRST   save the terminal status before upstream returns
 *   -DBUG_LWW              the register ignores the expected cursor (last write wins)
 *   -DBUG_RELEASE_LIVE     the reconciler releases a claim whose claimant is still alive
 *   -DBUG_NO_NONCE         an unknown save is settled by comparing snapshots without a nonce
 *   -DBUG_NO_FENCE         a resume calls upstream without first re-saving the claim (the
 *                          protocol before ADR-0054's fix; needs -DINFLIGHT to show)
 *   -DBUG_REJECT_IGNORES_EXPIRY  the machine's reject ignores expiry (a generated mutant table)
 *   -DBUG_NO_LEDGER_CLAIM  (with -DLEDGER) a tool body runs without its ledger claim: the
 *                          continuation only looks for a recorded result, then runs the body
 *   -DBUG_RERUN_UNKNOWN    (with -DLEDGER) an execution whose claimant is gone is run again
 *                          (the generated mutant ledger table of gen_lifecycles.RerunsUnknown)
 *   -DBUG_RUN_APPROVING    (with -DLEDGER) a body runs once the approve claim is saved, before
 *                          the record is `approved` (the continuation does not wait)
 *   -DBUG_NO_RECLAIM       (with -DLEDGER) reconcile never re-claims a crashed continuation
 *   -DBUG_RUN_UNINDEXED    (with -DLEDGER) the paused run record is saved without the processing
 *                          flag (the code before ADR-0106): the sweep never visits a run whose
 *                          continuer died before its claim (an acceptance cycle of run_settles)
 *   -DBUG_SWEEP_TAKES_LIVE (with -DLEDGER) the sweep takes over a continuation whose lease has
 *                          not passed (its owner is alive): caught by flag_only_dead
 *   -DBUG_AUDIT_AFTER      (with -DAUDIT) the entry is written after the claim applied: a
 *                          decider killed between the two leaves a claim no entry names
 *   -DBUG_AUDIT_SHARED     (with -DAUDIT) a decider that lost the entry's create sends its
 *                          claim anyway (no re-read, no fence): the entry names someone else
 *   -DBUG_GUARD_IGNORES_EDIT (with -DEDIT) the guard lets an edited call run with other args
 *   -DBUG_SWEEP_PLAIN      (with -DEDIT) the sweep continues an edited approval as a plain one
 *   -DBUG_CLAIM_DROPS_VERDICT (with -DSETTLE) a re-claim does not keep the verdict nonce
 *   -DBUG_SETTLE_ENTRY_AFTER  (with -DSETTLE) the settle's entry is written after its CAS
 */

#include "confirmation_table.pml"

#ifndef NCLIENTS
#define NCLIENTS 3
#endif
#ifndef NCONF
#define NCONF 1          /* 1 or 2 confirmations in the envelope */
#endif
#ifndef MAXOPS
#define MAXOPS 2         /* resolution attempts per client (across its crashes) */
#endif
#ifndef MAXCRASH
#define MAXCRASH 2       /* client crashes, in total */
#endif
#ifndef MAXUNKNOWN
#define MAXUNKNOWN 1     /* saves whose outcome the caller is not told, in total */
#endif
#ifndef MAXUPFAULT
#define MAXUPFAULT 1     /* upstream calls that fail or lose their reply, in total */
#endif

/* The nonce of the reconciler's resume fence: no client writes with it. */
#define RFENCE (NCLIENTS + 1)

#define CURSOR0 1        /* the stored envelope the run starts from (proposed, cursor 1) */

#define SAVE_OK 0
#define SAVE_CONFLICT 1  /* definite refusal: save returned False */
#define SAVE_UNKNOWN 2   /* OutcomeUnknown: it may or may not have applied */

#define UP_OK 0          /* upstream returned (it acted, or the call was already a no-op) */
#define UP_LOST 1        /* upstream acted, the reply was lost */
#define UP_FAILED 2      /* upstream failed without acting */

#define K_APPROVE 1
#define K_DENY 2
/* Which upstream call a claim leads to (docs/reference.md section 3.3: expiry denies). */
#define KIND_OF(s) (((s) == ST_APPROVING || (s) == ST_APPROVED) -> K_APPROVE : K_DENY)

/* ---------------------------------------------------------------- the CAS register */
byte reg_cursor = CURSOR0;
byte reg_st[NCONF];          /* status of each confirmation binding; 0 is ST_PENDING */
byte reg_writer = 0;         /* nonce of the stored snapshot (ADR-0062): its writer, 0 = host */

/* ---------------------------------------------------------------- upstream (ChatMemory) */
bool up_acted[NCONF];        /* the call left requires_confirmation: approve/deny are no-ops now */
byte up_kind[NCONF];         /* K_APPROVE / K_DENY: what upstream did */

/* ---------------------------------------------------------------- environment */
bool clock_past = false;     /* now() >= expiresAt (one expiresAt for every record) */
byte crashes = 0;
byte unknowns = 0;
byte upfaults = 0;

/* ---------------------------------------------------------------- ghosts (properties) */
byte applied = 0;            /* saves the register applied */
byte owner[NCONF];           /* client holding the live claim (may still call upstream), 0: none */
bool called[NCONF];          /* a client called upstream for the current claim */
bool bad_replay = false;     /* a 2nd client called for one claim, or a conflicting call */
bool bad_second = false;     /* any call (client or resume) after upstream acted */
bool bad_false = false;      /* a terminal status saved that upstream did not perform */
bool bad_sticky = false;     /* a terminal status changed */
bool claim_late[NCONF];      /* the record's current claim was decided at or after expiresAt */
bool bad_expiry = false;     /* approved/rejected reached through a claim made at or after expiry */

#ifdef ANY_INTENT
#define INTENT(ev) if :: ev = EV_APPROVE :: ev = EV_REJECT :: ev = EV_EXPIRE fi
#else
/* client 1 approves, client 2 rejects, client 3 expires (a sweeper), client 4 approves ... */
#define INTENT(ev) \
  if :: me % 3 == 1 -> ev = EV_APPROVE :: me % 3 == 2 -> ev = EV_REJECT :: else -> ev = EV_EXPIRE fi
#endif

#define PROC(i) IS_PROCESSING(reg_st[i])
#define FINAL(i) IS_FINAL(reg_st[i])
/* The claimant can no longer call upstream (crashed, gave up, lost an unknown claim). */
#define ORPHANED(i) (PROC(i) && owner[i] == 0)

#ifdef NO_RESUME
#define RECONCILABLE(i) ORPHANED(i)
#else
#define RECONCILABLE(i) PROC(i)
#endif

#ifdef BUG_RELEASE_LIVE
#define MAY_RELEASE(i) true
#elif defined(NO_RELEASE)
#define MAY_RELEASE(i) false
#else
#define MAY_RELEASE(i) (owner[i] == 0)
#endif

#ifdef AUDIT
/* ---------------------------------------------------------------- the audit entries */
/* audit:<token>:<cursor> for each record i and cursor c: its writer (a client id), 0 absent.
 * Create-only, so the model's create is one atomic step (the code settles an unknown create
 * by reading it back, or sends no claim).  Cursors stay below AUDCUR in every bound checked. */
#define AUDCUR 32
byte aud[NCONF * AUDCUR];
byte aud_k;                  /* scratch for the check below */
bool bad_audit = false;      /* a claim applied whose entry does not name its writer as the one
                              * with the highest cursor of the record's entries */

/* A claim of record i applies at cursor `expect`, written by `writer`: its entry must be the
 * writer's, and no entry of i may sit above it, or "the highest cursor is the decision" would
 * name someone else. */
inline audit_check_claim(i, expect, writer) {
  if
  :: aud[(i) * AUDCUR + (expect)] != (writer) -> bad_audit = true
  :: else -> skip
  fi;
  aud_k = (expect) + 1;
  do
  :: aud_k >= AUDCUR -> break
  :: else ->
     if
     :: aud[(i) * AUDCUR + aud_k] != 0 -> bad_audit = true
     :: else -> skip
     fi;
     aud_k++
  od;
  aud_k = 0
}
#endif

#ifdef EDIT
/* ---------------------------------------------------------------- reviewer edits (ADR-0135) */
/* Client 1's approve is an edit: its claim's audit entry records the edited arguments, whose
 * digest is D_EDIT; every other approve is plain (the model's arguments, D_MODEL).  The entry
 * with the highest cursor is the claim that applied (ADR-0132, audit_names_winner), so the
 * model keeps the deciding entry's digest with the record: dec_dg[i], set by the claim. */
#define D_MODEL 0
#define D_EDIT 1
#define EDIT_DG(w) ((w) == 1 -> D_EDIT : D_MODEL)
byte dec_dg[NCONF];          /* the deciding approval's arguments digest */
#endif

/* -DTRACE: one parseable line per step for tests/models' conformance driver (model -> code).
 * Without TRACE every TRACE_* expands to nothing: the checked model is token for token the same. */
#ifdef TRACE
#define TRACE_SAVE(i, expect, newst, writer, res) \
  ; printf("TR save w=%d i=%d expect=%d st=%d res=%d cursor=%d\n", writer, i, expect, newst, res, reg_cursor)
#define TRACE_UP(i, st, who, res) \
  ; printf("TR up w=%d i=%d st=%d res=%d acted=%d\n", who, i, st, res, up_acted[i])
#define TRACE_DECIDE(me, i, ev, st, claim, past) \
  ; printf("TR decide w=%d i=%d ev=%d st=%d claim=%d past=%d cursor=%d\n", me, i, ev, st, claim, past, reg_cursor)
#define TRACE_CRASH(me, i, res) \
  ; printf("TR crash w=%d i=%d res=%d cursor=%d st=%d\n", me, i, res, reg_cursor, reg_st[i])
#define TRACE_SETTLE(me, i, res) \
  ; printf("TR settle w=%d i=%d res=%d cursor=%d st=%d\n", me, i, res, reg_cursor, reg_st[i])
#define TRACE_RELOAD(me, i, res) \
  ; printf("TR reload w=%d i=%d res=%d cursor=%d st=%d\n", me, i, res, reg_cursor, reg_st[i])
#define TRACE_INERT(me, i, res) \
  ; printf("TR inert w=%d i=%d res=%d cursor=%d st=%d\n", me, i, res, reg_cursor, reg_st[i])
#define TRACE_DONE(me, i, res) \
  ; printf("TR done w=%d i=%d res=%d cursor=%d st=%d\n", me, i, res, reg_cursor, reg_st[i])
#else
#define TRACE_SAVE(i, expect, newst, writer, res)
#define TRACE_UP(i, st, who, res)
#define TRACE_DECIDE(me, i, ev, st, claim, past)
#define TRACE_CRASH(me, i, res)
#define TRACE_SETTLE(me, i, res)
#define TRACE_RELOAD(me, i, res)
#define TRACE_INERT(me, i, res)
#define TRACE_DONE(me, i, res)
#endif

/* Apply one write to the register (the compare already passed).  claimant: the client that
 * will act on a claim it just wrote (0: nobody, e.g. the host or a write landing late). */
inline apply_write(i, expect, newst, writer, claimant, late) {
  if
  :: IS_FINAL(reg_st[i]) && newst != reg_st[i] -> bad_sticky = true
  :: else -> skip
  fi;
  if
  :: IS_FINAL(newst) && !(up_acted[i] && up_kind[i] == KIND_OF(newst)) -> bad_false = true
  :: else -> skip
  fi;
  if
  :: newst == ST_PENDING -> called[i] = false; claim_late[i] = false  /* a release: new claim */
  :: reg_st[i] == ST_PENDING && IS_PROCESSING(newst) -> claim_late[i] = late   /* a claim */
#ifdef AUDIT
     ; audit_check_claim(i, expect, writer)
#endif
#ifdef EDIT
     ; dec_dg[i] = EDIT_DG(writer)      /* the deciding entry's arguments (ADR-0132/0135) */
#endif
  :: else -> skip
  fi;
  if                                  /* only expiry may finish a claim made after expiresAt */
  :: IS_FINAL(newst) && newst != ST_EXPIRED && claim_late[i] -> bad_expiry = true
  :: else -> skip
  fi;
  reg_cursor = expect + 1;
  reg_st[i] = newst;
  reg_writer = writer;
  applied++;
  if
  :: IS_PROCESSING(newst) && claimant != 0 -> owner[i] = claimant
  :: else -> skip
  fi;
#ifdef ASSERTS
  assert(!bad_sticky);
  assert(!bad_false);
  assert(!bad_expiry);
  assert(reg_cursor == CURSOR0 + applied);
#endif
  skip
}

#ifdef LEDGER
/* ---------------------------------------------------------------- the ledger (ADR-0100) */
/* One agent run holds every tool call (one per confirmation).  Its record run:<id> and each
 * call's execution record call:<id> are CAS records beside the envelope. */
/* The run record's and each call's ledger states and moves are the python machines' tables
 * (RunLifecycle, ExecutionLifecycle), generated by models/gen_lifecycles.py: RUN_NEXT and
 * EX_NEXT give a move's target, or RUN_NONE / EX_NONE when the machine refuses it (ADR-0120).
 * A fresh claim nonce is never `ours`; the model's tools are not idempotent. */
#include "lifecycle_tables.pml"
#define RCONT (NCLIENTS + 2)   /* the continuer's id (the owner it writes) */
#define RRECON (NCLIENTS + 3)  /* the run reconciler's id */
/* Outcomes of one call's execution step, beside SAVE_OK / SAVE_UNKNOWN. */
#define LED_RECORDED 3         /* executed already: its recorded result, the body is not run */
#define LED_UNKNOWN 4          /* executing, claimant gone: outcome unknown, never re-run */
#define LED_GAVE_UP 5          /* our claim's save did not apply: leave the run to reconcile */

byte run_st = RUN_PAUSED;
byte run_ver = 1;            /* the run record's version: every save is a CAS on it */
/* The run record's `processing` flag (ADR-0106): the session is in the processing index, the
 * only place the sweep looks.  It is a field of the run record, so every run save writes it in
 * the same atomic step as run_st: paused and continuing with it, completed without it.  The
 * pause save that stored the run before the model's first step wrote it too. */
#ifdef BUG_RUN_UNINDEXED
bool run_idx = false;        /* before ADR-0106: only a `continuing` record was indexed */
#else
bool run_idx = true;
#endif
byte ex_st[NCONF];           /* call:<i>: absent / executing / executed (EX_ABSENT is 0) */
byte ex_by[NCONF];           /* its stored claimant (the record's owner field) */
/* ghosts */
byte run_owner = 0;          /* the live process holding the run's continuation, 0: none */
byte ex_owner[NCONF];        /* the live claimant of call i's execution, 0: gone or finished */
bool ran[NCONF];             /* the tool body of call i has run */
bool bad_double = false;     /* a tool body ran twice */
bool bad_unapproved = false; /* a tool body ran while its confirmation was not approved */
bool bad_flag = false;       /* an execution reported unknown while its claimant was alive */
#ifdef EDIT
/* The continuation's side of an edit (ADR-0135). */
#ifndef MAXBADARGS
#define MAXBADARGS 1         /* continuations whose runtime hands the body the model's args */
#endif
#define LED_REFUSED 6        /* the guard refused the call (ArgumentsMismatch): nothing claimed */
byte badargs = 0;
byte ran_dg[NCONF];          /* ghost: the arguments the body ran with */
bool bad_edit = false;       /* a body ran with arguments other than the deciding entry's */
/* What the continuation reads as the call's arguments: the deciding entry's (its edit), or,
 * under BUG_SWEEP_PLAIN, the sweep reads the decision without its entry (as a plain approve). */
#ifdef BUG_SWEEP_PLAIN
#define EFFECTIVE(k) (me == RRECON -> D_MODEL : dec_dg[k])
#else
#define EFFECTIVE(k) dec_dg[k]
#endif
/* The execution guard (ExecutionGuard.execute): an edited call runs with the edit or not at
 * all; under BUG_GUARD_IGNORES_EDIT it lets any arguments through. */
#ifdef BUG_GUARD_IGNORES_EDIT
#define GUARD_REFUSES(k, a) false
#else
#define GUARD_REFUSES(k, a) (EFFECTIVE(k) == D_EDIT && (a) != D_EDIT)
#endif
/* The body ran with `arg`: it must be the deciding entry's arguments. */
#define EDIT_BODY(k) \
  if :: arg != dec_dg[k] -> bad_edit = true :: else -> skip fi; ran_dg[k] = arg
#define EDIT_RESET ; arg = 0
#else
#define EDIT_BODY(k) skip
#define EDIT_RESET
#endif

/* A call is settled for the continuation when its record is final; whether it runs, when it is
 * approved. */
#ifdef BUG_RUN_APPROVING
#define SETTLED(i) (FINAL(i) || reg_st[i] == ST_APPROVING)
#define RUNS(i) (reg_st[i] == ST_APPROVED || reg_st[i] == ST_APPROVING)
#else
#define SETTLED(i) FINAL(i)
#define RUNS(i) (reg_st[i] == ST_APPROVED)
#endif
#if NCONF > 1
#define ALL_SETTLED (SETTLED(0) && SETTLED(1))
#define ALL_FINAL (FINAL(0) && FINAL(1))
#define BLOCKED (EX_UNKNOWN(0) || EX_UNKNOWN(1))
#define EXEC_APPROVED (EX_APPROVED(0) && EX_APPROVED(1))
#else
#define ALL_SETTLED SETTLED(0)
#define ALL_FINAL FINAL(0)
#define BLOCKED EX_UNKNOWN(0)
#define EXEC_APPROVED EX_APPROVED(0)
#endif
/* An execution whose claimant is gone: the body may or may not have run. */
#define EX_UNKNOWN(i) (ex_st[i] == EX_EXECUTING && ex_owner[i] == 0)
/* Every executed (or executing) call's confirmation is approved. */
#define EX_APPROVED(i) (ex_st[i] == EX_ABSENT || reg_st[i] == ST_APPROVED)
/* Flagged for a person: the run waits on an unknown execution and the sweep lists it (its
 * session is in the processing index), so the operator's sweep output names it. */
#define FLAGGED (BLOCKED && run_idx)
/* The continuation's lease (leaseUntilMs, ADR-0106): a live owner renews it before every body
 * and it outlasts the longest body, so it passes only after the owner died.  The model lets it
 * pass at the death (the ghost run_owner is 0): a sweep that comes later is one of the sweep's
 * later visits, and a visit while it has not passed writes nothing. */
#ifdef BUG_SWEEP_TAKES_LIVE
#define LEASE_PASSED true
#else
#define LEASE_PASSED (run_owner == 0)
#endif
/* The run reconciler (the sweep's bridge hook) continues a run when every call is settled and
 * no continuation is alive; it reads the ledger first and leaves a run that waits on an
 * unknown outcome to the operator (never re-run).  It visits only indexed sessions. */
#ifdef BUG_NO_RECLAIM
#define RECLAIMABLE (run_idx && run_st == RUN_PAUSED && ALL_SETTLED)
#elif defined(BUG_RERUN_UNKNOWN)
#define RECLAIMABLE \
  (run_idx && ((run_st == RUN_PAUSED && ALL_SETTLED) || (run_st == RUN_CONTINUING && LEASE_PASSED)))
#else
#define RECLAIMABLE \
  (run_idx && \
   ((run_st == RUN_PAUSED && ALL_SETTLED) || (run_st == RUN_CONTINUING && LEASE_PASSED && !BLOCKED)))
#endif

#if NCONF > 1
#define DISOWN_EX if :: ex_owner[0] == me -> ex_owner[0] = 0 :: else -> skip fi; \
                  if :: ex_owner[1] == me -> ex_owner[1] = 0 :: else -> skip fi
#else
#define DISOWN_EX if :: ex_owner[0] == me -> ex_owner[0] = 0 :: else -> skip fi
#endif
#define DISOWN_LEDGER ; if :: run_owner == me -> run_owner = 0 :: else -> skip fi; DISOWN_EX
#else
#define DISOWN_LEDGER
#endif

#ifdef INFLIGHT
/* One write whose request is still travelling: it may land later, or never (ADR-0066). */
bool fly = false;
byte fly_i, fly_expect, fly_st, fly_writer;
bool fly_late;
byte fly_claimant;           /* ghost: the writer, until it gives the write up */

active proctype Network() {
end_net:
  do
  :: atomic {
       fly ->
       if
       :: reg_cursor == fly_expect ->
          apply_write(fly_i, fly_expect, fly_st, fly_writer, fly_claimant, fly_late)
       :: else -> skip                               /* it lands and is refused */
       fi;
       fly = false; fly_i = 0; fly_expect = 0; fly_st = 0; fly_writer = 0; fly_claimant = 0;
       fly_late = false
     }
  od
}
#endif

/* Register write, atomic with the compare.  writer: the write's nonce (client id; 0 for the
 * reconciler's release/complete, RFENCE for its resume fence).  claimant: who becomes the live
 * owner of a processing status it writes (the writer for a client claim, 0 for a fence).
 * late (ghost): a claim decided on a clock reading at or after expiresAt. */
inline cas_save_as(i, expect, newst, writer, claimant, late, res) {
  atomic {
    if
#ifdef INFLIGHT
    :: unknowns < MAXUNKNOWN ->           /* the request is still on its way: unknown now */
       unknowns++; res = SAVE_UNKNOWN;
       fly = true; fly_i = i; fly_expect = expect; fly_st = newst; fly_writer = writer;
       fly_claimant = claimant; fly_late = late
#endif
    :: true ->
       if
#ifdef BUG_LWW
       :: true ->
#else
       :: reg_cursor == expect ->
#endif
          apply_write(i, expect, newst, writer, claimant, late);
          res = SAVE_OK
       :: else -> res = SAVE_CONFLICT
       fi;
       if
       :: unknowns < MAXUNKNOWN -> unknowns++; res = SAVE_UNKNOWN   /* reply lost */
       :: true -> skip
       fi
    fi TRACE_SAVE(i, expect, newst, writer, res)
  }
}

#define cas_save(i, expect, newst, writer, res) \
  cas_save_as(i, expect, newst, writer, writer, false, res)

/* Upstream approve/deny for tool call i, claimed as st; by a client (me > 0) or a resume (0).
 * Upstream acts only while the call requires confirmation; otherwise the call is a no-op. */
inline upstream_call(i, st, who, res) {
  atomic {
    if
    :: who != 0 && called[i] -> bad_replay = true       /* two claim winners */
    :: up_acted[i] && up_kind[i] != KIND_OF(st) -> bad_replay = true   /* conflicting call */
    :: else -> skip
    fi;
    if
    :: who != 0 -> called[i] = true
    :: else -> skip
    fi;
    if
    :: up_acted[i] -> bad_second = true
    :: else -> skip
    fi;
#ifdef ASSERTS
    assert(!bad_replay);
#endif
    if
    :: res = UP_OK
    :: upfaults < MAXUPFAULT -> upfaults++; res = UP_LOST
    :: upfaults < MAXUPFAULT -> upfaults++; res = UP_FAILED
    fi;
    if
    :: res != UP_FAILED && !up_acted[i] -> up_acted[i] = true; up_kind[i] = KIND_OF(st)
    :: else -> skip
    fi TRACE_UP(i, st, who, res)
  }
}

/* The client gives up its claim (it will not call upstream for it any more). */
#ifdef INFLIGHT
#define DISOWN(i) \
  if :: owner[i] == me -> owner[i] = 0 :: else -> skip fi; \
  if :: fly_claimant == me && fly_i == i -> fly_claimant = 0 :: else -> skip fi
#else
#define DISOWN(i) if :: owner[i] == me -> owner[i] = 0 :: else -> skip fi
#endif

#if NCONF > 1
#define DISOWN_ALL DISOWN(0); DISOWN(1) DISOWN_LEDGER
#else
#define DISOWN_ALL DISOWN(0) DISOWN_LEDGER
#endif

/* Optionally crash right after the step this ends (which is the same as crashing before the
 * next one).  A crash loses every local variable; the client restarts from scratch. */
#define MAYBE_CRASH \
  if \
  :: crashes < MAXCRASH -> crashes++; crashed = true; DISOWN_ALL TRACE_CRASH(me, 0, 0) \
  :: true -> skip \
  fi

#define ON_CRASH if :: crashed -> goto restart :: else -> skip fi

/* An unknown save applied iff the stored snapshot is exactly ours (ADR-0062/0066). */
#ifdef BUG_NO_NONCE
#define OURS_AS(i, cur, st, w) (reg_cursor == (cur) + 1 && reg_st[i] == (st))
#else
#define OURS_AS(i, cur, st, w) (reg_cursor == (cur) + 1 && reg_writer == (w))
#endif
#define OURS(i, cur, st) OURS_AS(i, cur, st, me)

/* CAS#2: save the terminal status, re-reading and rebasing on conflict or unknown outcome. */
inline finish() {
  do
  :: atomic {
       fsm_next(claim, EV_COMPLETE, false, fin);
       cas_save(i, cur, fin, me, res);
       if
       :: res == SAVE_UNKNOWN && OURS(i, cur, fin) -> res = SAVE_OK
       :: else -> skip
       fi;
       fin = 0;
       if
       :: res == SAVE_OK -> DISOWN(i)
       :: else -> MAYBE_CRASH
       fi
     };
     ON_CRASH;
     if
     :: res == SAVE_OK -> break
     :: else ->
        atomic {                          /* conflict or not applied: reload */
          cur = reg_cursor;
          if
          :: reg_st[i] == claim -> skip   /* still our claim: retry on the new cursor */
          :: else -> res = SAVE_OK; DISOWN(i)   /* a resume completed it */
          fi TRACE_RELOAD(me, i, res);
          MAYBE_CRASH
        };
        ON_CRASH;
        if
        :: res == SAVE_OK -> break
        :: else -> skip
        fi
     fi
  od
}

#ifdef LEDGER
/* Execute call k of the run we hold, through its ledger record call:<k>. */
inline execute(k) {
  atomic {                                /* claim: create-only CAS (or read what exists) */
#ifdef BUG_NO_LEDGER_CLAIM
    if                                    /* looks for a recorded result, claims nothing */
    :: ex_st[k] == EX_EXECUTED -> res = LED_RECORDED
    :: else -> res = SAVE_OK
    fi;
#else
    if
    :: EX_NEXT(ex_st[k], EXEV_CLAIM, 0, 0) != EX_NONE ->     /* the machine lets a claim move */
       if
       :: ex_st[k] = EX_NEXT(ex_st[k], EXEV_CLAIM, 0, 0); ex_by[k] = me; ex_owner[k] = me;
          res = SAVE_OK;
          if
          :: unknowns < MAXUNKNOWN -> unknowns++; res = SAVE_UNKNOWN   /* reply lost */
          :: true -> skip
          fi
       :: unknowns < MAXUNKNOWN -> unknowns++; res = SAVE_UNKNOWN      /* not applied */
       fi
    :: EX_NEXT(ex_st[k], EXEV_CLAIM, 0, 0) == EX_NONE && EX_FINAL(ex_st[k]) -> res = LED_RECORDED
    /* executing under another claim: outcome unknown, never re-run (BUG_RERUN_UNKNOWN is a
     * generated mutant table whose claim moves here instead) */
    :: EX_NEXT(ex_st[k], EXEV_CLAIM, 0, 0) == EX_NONE && !EX_FINAL(ex_st[k]) -> res = LED_UNKNOWN;
       if                                 /* reported to the operator as unknown */
       :: ex_owner[k] != 0 -> bad_flag = true
       :: else -> skip
       fi
    fi;
#ifdef ASSERTS
    assert(!bad_flag);
#endif
#endif
    MAYBE_CRASH                           /* after the claim */
  };
  ON_CRASH;
  if
  :: res == SAVE_UNKNOWN ->               /* settle by re-reading the record's owner */
     atomic {
       if
       /* our own claim found again: the machine's self-loop under `ours` */
       :: ex_by[k] == me && EX_NEXT(ex_st[k], EXEV_CLAIM, 1, 0) == ex_st[k] -> res = SAVE_OK
       :: else -> res = LED_GAVE_UP
       fi;
       MAYBE_CRASH
     };
     ON_CRASH
  :: else -> skip
  fi;
  if
  :: res == SAVE_OK ->
     atomic {                             /* the tool body */
       if
       :: reg_st[k] != ST_APPROVED -> bad_unapproved = true
       :: else -> skip
       fi;
       if
       :: ran[k] -> bad_double = true
       :: else -> ran[k] = true
       fi;
       EDIT_BODY(k);
#ifdef ASSERTS
       assert(!bad_double && !bad_unapproved);
#ifdef EDIT
       assert(!bad_edit);
#endif
#endif
       MAYBE_CRASH                        /* after the body, before its result is recorded */
     };
     ON_CRASH;
     atomic {                             /* CAS executing (ours) -> executed, with the result */
#ifdef BUG_NO_LEDGER_CLAIM
       ex_st[k] = EX_EXECUTED; ex_by[k] = me;
#else
       if
       :: EX_NEXT(ex_st[k], EXEV_FINISH, ex_by[k] == me, 0) != EX_NONE ->
          ex_st[k] = EX_NEXT(ex_st[k], EXEV_FINISH, ex_by[k] == me, 0)
       :: else -> skip
       fi;
#endif
       if
       :: ex_owner[k] == me -> ex_owner[k] = 0
       :: else -> skip
       fi;
       res = SAVE_OK;
       MAYBE_CRASH                        /* before the continuation completes */
     };
     ON_CRASH
  :: else -> skip
  fi
}

#ifdef EDIT
/* The runtime hands call k its arguments: the ones the continuation read (override_args), or,
 * within MAXBADARGS, the model's (a runtime that ignored the override, a middleware that
 * rewrote them).  The guard checks them before the ledger claim; a refusal raises out of the
 * runtime and the continuation releases the run to `paused` (its calls stay decided). */
inline edit_guard(k) {
  atomic {
    if
    :: arg = EFFECTIVE(k)
    :: badargs < MAXBADARGS -> badargs++; arg = D_MODEL
    fi;
    if
    :: GUARD_REFUSES(k, arg) ->
       res = LED_REFUSED;
       if
       :: RUN_NEXT(run_st, RUNEV_RELEASE, run_ver == rv, 0) != RUN_NONE ->
          run_st = RUN_NEXT(run_st, RUNEV_RELEASE, run_ver == rv, 0); run_ver++
       :: else -> skip
       fi
    :: else -> res = 0
    fi
  }
}
#endif

/* Run every approved call of the run we hold (rv: the version our claim wrote), then complete
 * the run with a CAS on that version.  Rejected and expired calls get their denial, which
 * runs nothing.  A call whose outcome is unknown stops the continuation: the run waits for
 * the operator. */
inline run_calls() {
  k = 0;
  do
  :: k < NCONF && !RUNS(k) -> k++
  :: k < NCONF && RUNS(k) ->
#ifdef EDIT
     edit_guard(k);
     if
     :: res == LED_REFUSED -> break     /* released: a later continuation runs it again */
     :: else -> skip
     fi;
#endif
     execute(k);
     if
     :: res == LED_UNKNOWN || res == LED_GAVE_UP -> break
     :: else -> k++
     fi
  :: k >= NCONF ->
     atomic {
       if
       :: RUN_NEXT(run_st, RUNEV_COMPLETE, run_ver == rv, 0) != RUN_NONE ->  /* ours: our CAS */
          run_st = RUN_NEXT(run_st, RUNEV_COMPLETE, run_ver == rv, 0); run_ver++;
          run_idx = false                 /* completed: saved without it, out of the index */
       :: else -> skip
       fi
     };
     break
  od;
  atomic {
    if
    :: run_owner == me -> run_owner = 0
    :: else -> skip
    fi;
    k = 0; rv = 0; res = 0 EDIT_RESET
  }
}

#endif

proctype Client(byte me) {
  byte ops = 0, i, cur, claim, fin, res, up;
  bool crashed, late;
restart:
  atomic { crashed = false; i = 0; cur = 0; claim = 0; fin = 0; res = 0; up = 0; late = false };
  do
  :: ops >= MAXOPS -> break
  :: ops < MAXOPS ->
     ops++;
     if                                   /* which record */
     :: i = 0
#if NCONF > 1
     :: i = 1
#endif
     fi;
     atomic {                             /* load, read the injected clock, decide */
       if                                 /* time may have passed expiresAt by now */
       :: !clock_past -> clock_past = true
       :: true -> skip
       fi;
       cur = reg_cursor;
       INTENT(fin);                       /* fin holds the event for a moment */
       fsm_next(reg_st[i], fin, clock_past, claim) TRACE_DECIDE(me, i, fin, reg_st[i], claim, clock_past);
       if
       :: claim != ST_NONE -> late = clock_past   /* ghost: the claim read a clock past expiry */
       :: else -> skip
       fi;
       fin = 0;
       MAYBE_CRASH
     };
     ON_CRASH;
     if
     :: claim == ST_NONE -> skip TRACE_INERT(me, i, 0)   /* processing/terminal/guarded */
     :: else ->
#ifdef BUG_UPSTREAM_FIRST
        atomic { upstream_call(i, claim, me, up); MAYBE_CRASH };
        ON_CRASH;
#endif
#if defined(AUDIT) && !defined(BUG_AUDIT_AFTER)
        atomic {                          /* the claim's audit entry, create-only */
          if
          :: cur >= AUDCUR -> bad_audit = true   /* the bound is too small: say so */
          :: aud[i * AUDCUR + cur] == 0 -> aud[i * AUDCUR + cur] = me; res = SAVE_OK
          :: else -> res = SAVE_CONFLICT  /* another decider holds this cursor */
          fi;
          MAYBE_CRASH
        };
        ON_CRASH;
        if
#ifdef BUG_AUDIT_SHARED
        :: false ->                       /* the lost create is ignored: claim anyway */
#else
        :: res == SAVE_CONFLICT ->
#endif
           atomic {                       /* re-read; fence the cursor if it has not moved */
             if
             :: reg_cursor == cur -> cas_save_as(i, cur, reg_st[i], me, 0, false, res)
             :: else -> skip
             fi;
             claim = ST_NONE;             /* decide again on a later attempt */
             MAYBE_CRASH
           };
           ON_CRASH
        :: else -> skip
        fi;
#endif
        if
        :: claim == ST_NONE -> res = SAVE_CONFLICT
        :: else ->
        atomic {                          /* CAS#1: the claim */
          cas_save_as(i, cur, claim, me, me, late, res);
          late = false;
#ifdef BUG_AUDIT_AFTER
          if                              /* the entry only once the claim applied */
          :: res != SAVE_CONFLICT && cur < AUDCUR && aud[i * AUDCUR + cur] == 0 ->
             aud[i * AUDCUR + cur] = me
          :: else -> skip
          fi;
#endif
          MAYBE_CRASH
        }
        fi;
        ON_CRASH;
        if
        :: res == SAVE_UNKNOWN ->         /* settle by re-reading */
           atomic {
             if
             :: OURS(i, cur, claim) -> res = SAVE_OK
             :: else -> DISOWN(i)         /* not applied, or not provably ours: never call */
             fi TRACE_SETTLE(me, i, res);
             MAYBE_CRASH
           };
           ON_CRASH
        :: else -> skip
        fi;
        if
        :: res == SAVE_OK ->
#ifdef BUG_TERMINAL_FIRST
           finish();
           atomic { upstream_call(i, claim, me, up); DISOWN(i) }
#else
#ifndef BUG_UPSTREAM_FIRST
           atomic {
             upstream_call(i, claim, me, up);
             if
             :: up != UP_OK -> DISOWN(i)  /* error: stays processing, left to reconciliation */
             :: else -> skip
             fi;
             MAYBE_CRASH
           };
           ON_CRASH;
#endif
           if
           :: up == UP_OK -> finish()
           :: else -> DISOWN(i)
           fi
#endif
        :: else -> DISOWN(i)              /* conflict: another writer won, nothing to do */
        fi
     fi;
     atomic { i = 0; cur = 0; claim = 0; fin = 0; res = 0; up = 0; late = false TRACE_DONE(me, i, 0) }
  od
}

/* The host's reconciler (ADR-0012): settles processing records from the upstream tool-call
 * status, with CAS.  Upstream acted -> complete.  Not acted -> resume or, when the host knows
 * the claimant is gone, release to pending.  A resume first re-saves the unchanged claim (a
 * fence: cursor + 1, its own nonce) and calls upstream only if that save applied, so no write
 * issued before it (a release still in flight, ADR-0054) can land after upstream acted; then it
 * saves the final status on the fenced cursor. */
active proctype Reconciler() {
  byte i, cur, st, fin, res, up;
end_idle:
  if                                      /* load: wait for a reconcilable record */
  :: atomic { RECONCILABLE(0) -> i = 0; cur = reg_cursor; st = reg_st[0] }
#if NCONF > 1
  :: atomic { RECONCILABLE(1) -> i = 1; cur = reg_cursor; st = reg_st[1] }
#endif
  fi;
  atomic {                                /* read the tool call's status, decide */
    if
    :: up_acted[i] -> fsm_next(st, EV_COMPLETE, false, fin)
    :: !up_acted[i] && MAY_RELEASE(i) -> fsm_next(st, EV_RELEASE, false, fin)
#ifndef NO_RESUME
    :: !up_acted[i] -> fin = ST_NONE      /* resume */
#endif
    fi
  };
#ifndef NO_RESUME
  if
  :: fin == ST_NONE ->
#ifdef BUG_NO_FENCE
     res = SAVE_OK;                       /* call upstream unfenced (the protocol before 0054) */
#else
     /* the fence: the unchanged claim, saved with CAS (claimant 0: it takes over no ghost) */
     cas_save_as(i, cur, st, RFENCE, 0, false, res);
     atomic {
       if
       :: res == SAVE_UNKNOWN && OURS_AS(i, cur, st, RFENCE) -> res = SAVE_OK   /* re-read */
       :: else -> skip                    /* conflict, not applied, or another write won */
       fi;
       if
       :: res == SAVE_OK -> cur = cur + 1 /* the final status goes on the fenced cursor */
       :: else -> skip
       fi
     };
#endif
     if
     :: res == SAVE_OK ->                 /* fenced: only now re-issue the claimed call */
        atomic {
          upstream_call(i, st, 0, up);
          if
          :: up == UP_OK -> fsm_next(st, EV_COMPLETE, false, fin)
          :: else -> skip                 /* stays processing: decide again later */
          fi;
          up = 0; res = 0
        }
     :: else -> res = 0                   /* conflict / not applied: reload, decide again */
     fi
  :: else -> skip
  fi;
#endif
  atomic {                                /* whatever the outcome: re-read, decide again */
    if
    :: fin != ST_NONE -> cas_save(i, cur, fin, 0, res)
    :: else -> skip
    fi;
    i = 0; cur = 0; st = 0; fin = 0; res = 0
  };
  goto end_idle
}

#ifdef LEDGER
/* The processes that continue the agent run.  The continuer (the last decider, or the host's
 * worker) continues the run once all its calls are settled; the run reconciler (the sweep,
 * `reconcile_all` with the bridge hook) does too, and also takes over a continuation whose
 * lease passed, but it visits only indexed sessions.  Either claims the run with one CAS on
 * its version (paused -> continuing, or continuing -> continuing for a takeover), so two of
 * them never hold it at once; the ledger then says, per approved call, run it (absent), return
 * its result (executed) or leave it (executing, claimant gone: outcome unknown).  Either may
 * crash after any step, like a client; a restarted sweep picks the run up again.  The
 * continuer may also die before its claim (after the last decision's terminal save): then
 * only the sweep can continue the run. */
#define RUN_CLAIMABLE (reclaims -> RECLAIMABLE : (run_st == RUN_PAUSED && ALL_SETTLED))
#define RECOVER (reclaims && LEASE_PASSED)   /* the recover guard's input: the lease passed */
proctype Runner(byte me; bool reclaims) {
  byte k, rv, res;
#ifdef EDIT
  byte arg;
#endif
  bool crashed;
restart:
  atomic { crashed = false; k = 0; rv = 0; res = 0 EDIT_RESET };
end_idle:
  if
  :: atomic {
       RUN_CLAIMABLE && RUN_NEXT(run_st, RUNEV_CLAIM, 0, RECOVER) != RUN_NONE ->
       run_st = RUN_NEXT(run_st, RUNEV_CLAIM, 0, RECOVER); run_idx = true;   /* one save */
       run_ver++; rv = run_ver; run_owner = me;
       MAYBE_CRASH                        /* after the run claim */
     };
     ON_CRASH;
     run_calls()
  :: atomic {                             /* the decider dies before the run claim */
       !reclaims && RUN_CLAIMABLE && crashes < MAXCRASH -> crashes++
     };
     goto end_gone
#ifndef ASSERTS
  /* A sweep that finds nothing of its own (the session is not listed, or its run waits for a
   * person or a live owner) writes nothing: it comes back.  So the sweep runs infinitely often
   * and weak fairness is a fair sweep.  Not in assertion runs: their Quiet monitor needs a
   * state where nothing moves. */
  :: atomic { reclaims && !(RUN_CLAIMABLE && RUN_NEXT(run_st, RUNEV_CLAIM, 0, RECOVER) != RUN_NONE) }
#endif
  fi;
  goto end_idle;
end_gone:
  skip
}

#ifdef ASSERTS
/* When nothing can move any more (every client done, every reconciler idle): nothing is left
 * processing except executions whose outcome is unknown, a settled run was continued, and
 * every approved call of a completed run was executed exactly once. */
#if NCONF > 1
#define QUIET_CALLS (QUIET_CALL(0) && QUIET_CALL(1) && !PROC(0) && !PROC(1))
#else
#define QUIET_CALLS (QUIET_CALL(0) && !PROC(0))
#endif
#define QUIET_CALL(i) \
  (EX_APPROVED(i) && (ex_st[i] != EX_EXECUTED || ran[i]) && (!ran[i] || ex_st[i] != EX_ABSENT) && \
   (ex_st[i] != EX_EXECUTING || ex_owner[i] == 0) && \
   (run_st != RUN_COMPLETED || reg_st[i] != ST_APPROVED || ex_st[i] == EX_EXECUTED))
active proctype Quiet() {
  atomic {
    timeout ->
    assert(QUIET_CALLS);
    assert(run_st != RUN_CONTINUING || BLOCKED);
    assert(!ALL_FINAL || run_st != RUN_PAUSED);
    assert(run_idx == (run_st != RUN_COMPLETED))   /* ADR-0106: indexed iff work is left */
  }
}
#endif
#endif

#ifdef SETTLE
/* ---------------------------------------------------------------- operators' settles (ADR-0136) */
/* One execution record call:<id> whose claimant was slow (its body still running, or dead: an
 * operator cannot tell), the state the -DLEDGER part leaves for a person.  Two operators settle
 * it ("it ran" or "it did not run"), each attempt creating its audit entry
 * audit-settle:<call>:<version>:<nonce> before its compare-and-set over that version; the
 * verdict's write stores the nonce in the record (LedgerEntry.verdict) and every later write
 * keeps it.  The claimant may finish late; a released call is claimed again by the next
 * continuation, which may die (unknown again) or finish.  settle_decided's rule: an entry
 * applied iff its nonce is the record's verdict now or some entry follows it. */
#ifndef LEDGER
#include "lifecycle_tables.pml"
#endif
#ifndef MAXSETTLE
#define MAXSETTLE 3          /* settle attempts, in total (each its own nonce 1..3) */
#endif
#ifndef MAXRECLAIM
#define MAXRECLAIM 1         /* claims of a released call by a later continuation */
#endif
#define SX_CLAIMANT 1        /* the first claim's nonce (its claimant, slow or dead) */
#define SX_OPERATOR 9        /* OPERATOR_CLAIM: the claim a verdict records, nobody's nonce */
#define SX_RECLAIM 10        /* a re-claim's nonce is SX_RECLAIM + its number */

byte sx_st = EX_EXECUTING;   /* the record: claimed, never finished */
byte sx_ver = 1;             /* its version: every write is a CAS on it */
byte sx_claim = SX_CLAIMANT; /* its claim field */
byte sx_verdict = 0;         /* LedgerEntry.verdict: the nonce of the last verdict that applied */
byte se_next = 0;            /* the last nonce handed out */
bool se_made[MAXSETTLE + 1]; /* the attempt's audit entry exists */
byte se_follows[MAXSETTLE + 1];   /* its `follows`: the verdict the record carried when read */
/* ghosts */
bool se_applied[MAXSETTLE + 1];   /* the attempt's compare-and-set applied */
bool bad_told = false;       /* an operator was told "applied" / "nothing written" wrongly */

#define SE_FOL(m, n) (se_follows[m] == (n))
#if MAXSETTLE >= 3
#define SE_NAMED(n) (sx_verdict == (n) || SE_FOL(1, n) || SE_FOL(2, n) || SE_FOL(3, n))
#elif MAXSETTLE == 2
#define SE_NAMED(n) (sx_verdict == (n) || SE_FOL(1, n) || SE_FOL(2, n))
#else
#define SE_NAMED(n) (sx_verdict == (n) || SE_FOL(1, n))
#endif
/* Nonce n's verdict applied only after its entry existed, and the trail marks it applied
 * exactly when it did (settle_decided). */
#define SE_OK(n) ((se_made[n] || !se_applied[n]) && (!se_made[n] || SE_NAMED(n) == se_applied[n]))
#if MAXSETTLE >= 3
#define SETTLE_EXACT (SE_OK(1) && SE_OK(2) && SE_OK(3))
#elif MAXSETTLE == 2
#define SETTLE_EXACT (SE_OK(1) && SE_OK(2))
#else
#define SETTLE_EXACT SE_OK(1)
#endif
#ifdef ASSERTS
#define SE_ASSERT ; assert(SETTLE_EXACT)
#else
#define SE_ASSERT
#endif
#define SX_CRASH if :: crashes < MAXCRASH -> crashes++; crashed = true :: true -> skip fi

/* Create attempt n's entry (before its CAS; after it under BUG_SETTLE_ENTRY_AFTER). */
inline sx_entry(n, f) {
  se_made[n] = true; se_follows[n] = f
}

/* An operator's settle_unknown: read the record, which must be an unknown execution; create
 * the entry; one CAS over the version read; an unknown answer is settled by re-reading the
 * record's verdict (ADR-0136).  It may die after any step.  It may settle again later (the
 * next unknown: a re-claim that died), within MAXSETTLE attempts in all. */
proctype Operator(byte me) {
  byte v, s, f, t, n, res;
  bool crashed = false;
end_idle:
  do
  :: atomic {                            /* load: an unknown execution, and a verdict */
       se_next < MAXSETTLE && sx_st == EX_EXECUTING ->
       v = sx_ver; s = sx_st; f = sx_verdict;
       if
       :: t = EX_NEXT(s, EXEV_SETTLE_RAN, 0, 0)
       :: t = EX_NEXT(s, EXEV_RELEASE, 0, 0)
       fi;
       se_next++; n = se_next;
       SX_CRASH
     };
     if :: crashed -> break :: else -> skip fi;
#ifndef BUG_SETTLE_ENTRY_AFTER
     atomic { sx_entry(n, f); SX_CRASH SE_ASSERT };   /* create-only, before the CAS */
     if :: crashed -> break :: else -> skip fi;
#endif
     atomic {                            /* the verdict: CAS over version v */
       if
       :: sx_ver == v && t != EX_NONE ->
          sx_st = t; sx_ver++; sx_claim = SX_OPERATOR; sx_verdict = n; se_applied[n] = true;
          res = SAVE_OK
       :: else -> res = SAVE_CONFLICT
       fi;
       if
       :: unknowns < MAXUNKNOWN -> unknowns++; res = SAVE_UNKNOWN   /* the reply is lost */
       :: true -> skip
       fi;
#ifndef BUG_SETTLE_ENTRY_AFTER
       SX_CRASH SE_ASSERT
#endif
     };
#ifdef BUG_SETTLE_ENTRY_AFTER
     atomic { SX_CRASH };                /* killed between the write and its entry */
     if :: crashed -> break :: else -> skip fi;
     atomic { sx_entry(n, f) };
#endif
     if :: crashed -> break :: else -> skip fi;
     atomic {                            /* not applied or unknown: re-read our nonce */
       if
#ifdef BUG_SETTLE_REREAD_ONLY
       :: res != SAVE_OK -> res = (sx_verdict == n -> SAVE_OK : SAVE_CONFLICT)
#else
       /* a lost answer: the record's verdict, else the call's settle trail (an entry that
        * follows our nonce: it applied, and a later verdict replaced it) */
       :: res == SAVE_UNKNOWN -> res = (SE_NAMED(n) -> SAVE_OK : SAVE_CONFLICT)
       :: res == SAVE_CONFLICT -> res = (sx_verdict == n -> SAVE_OK : SAVE_CONFLICT)
#endif
       :: else -> skip
       fi;
       if                                /* what the operator is told */
       :: (res == SAVE_OK) != se_applied[n] -> bad_told = true
       :: else -> skip
       fi;
       v = 0; s = 0; f = 0; t = 0; n = 0; res = 0
       SE_ASSERT
     }
  od
}

/* The claimant whose body was slow: it may finish late (decide_finish needs `ours`; a
 * settled or re-claimed record raises ExecutionClaimLost), or die and never come back. */
active proctype SettleClaimant() {
  byte v, t;
  bool crashed = false;
  do
  :: atomic { SX_CRASH; if :: crashed -> break :: else -> skip fi };   /* dead */
     break
  :: atomic { v = sx_ver; t = EX_NEXT(sx_st, EXEV_FINISH, sx_claim == SX_CLAIMANT, 0) };
     if
     :: t == EX_NONE -> break            /* ExecutionClaimLost: its claim was settled */
     :: else -> skip
     fi;
     atomic {
       if
       :: sx_ver == v -> sx_st = t; sx_ver++; break   /* keeps claim and verdict */
       :: else -> skip                   /* conflict: re-read, decide again */
       fi
       SE_ASSERT
     }
  od
}

/* The next continuation: claims a released call (decide_claim carries the verdict), runs it,
 * and finishes or dies (an unknown execution again, for the operators). */
active proctype Reclaimer() {
  byte v, t, c = 0;
  bool crashed = false;
end_idle:
  do
  :: atomic {
       c < MAXRECLAIM && EX_NEXT(sx_st, EXEV_CLAIM, 0, 0) != EX_NONE && sx_st == EX_RELEASED ->
       c++; sx_st = EX_NEXT(sx_st, EXEV_CLAIM, 0, 0); sx_ver++; sx_claim = SX_RECLAIM + c;
#ifdef BUG_CLAIM_DROPS_VERDICT
       sx_verdict = 0;                   /* a writer that does not keep the verdict */
#endif
       SX_CRASH SE_ASSERT
     };
     if
     :: crashed -> crashed = false        /* died after its claim: unknown again */
     :: else ->
        do
        :: atomic { v = sx_ver; t = EX_NEXT(sx_st, EXEV_FINISH, sx_claim == SX_RECLAIM + c, 0) };
           if
           :: t == EX_NONE -> break
           :: else -> skip
           fi;
           atomic {
             if
             :: sx_ver == v -> sx_st = t; sx_ver++; break
             :: else -> skip
             fi
             SE_ASSERT
           }
        od
     fi
  od
}
#endif

init {
  byte k = 1;
  atomic {
    do
    :: k <= NCLIENTS -> run Client(k); k++
    :: else -> break
    od;
#ifdef SETTLE
    run Operator(2);
    run Operator(3);
#endif
#ifdef LEDGER
    run Runner(RCONT, false);
    run Runner(RRECON, true)
#endif
  }
}

/* Only one claim winner calls upstream, and no call contradicts what upstream did. */
ltl no_replay { [] !bad_replay }
/* DESIGN's wording: no approve/deny at all once upstream acted (holds with NO_RESUME only). */
ltl single_call { [] !bad_second }
ltl no_false_completion { [] !bad_false }
ltl terminal_immutable { [] !bad_sticky }
ltl cursor_exact { [] (reg_cursor == CURSOR0 + applied) }
/* Only expiry finishes a claim that was made at or after expiresAt. */
ltl expiry_honoured { [] !bad_expiry }
#ifdef LEDGER
/* A tool body runs at most once per tool call. */
ltl body_once { [] !bad_double }
/* A body runs only for an approved confirmation; every execution's confirmation is approved. */
ltl body_approved { [] (!bad_unapproved && EXEC_APPROVED) }
/* body_once's companion for the lease: an execution is reported unknown (flagged for a
 * person) only when its claimant is gone, never while a live continuation runs it. */
ltl flag_only_dead { [] !bad_flag }
/* Under a fair sweep, every run whose calls are all decided eventually completes or is flagged
 * for a person: it waits on an unknown execution, and its session is in the processing index
 * (issue 22; ADR-0106). */
ltl run_settles { [] (ALL_FINAL -> <> (run_st == RUN_COMPLETED || FLAGGED)) }
#ifdef EDIT
/* An edited approval's body runs only with the edit (and, by body_once, at most once). */
ltl body_edited { [] !bad_edit }
#endif
#endif
#ifdef AUDIT
/* Every claim that applied was announced by its writer's entry at its cursor, before it, and
 * that entry is the record's highest: the trail names exactly who decided (ADR-0132). */
ltl audit_names_winner { [] !bad_audit }
#endif
#ifdef SETTLE
/* A settle's audit entry is marked applied (settle_decided) iff its verdict's write applied. */
ltl settle_audit_exact { [] SETTLE_EXACT }
/* An operator is told "settled" iff its verdict's write applied. */
ltl settle_told { [] !bad_told }
#endif
/* A claimed record is eventually terminal, or orphaned (its claimant gone). */
ltl claim_settles { [] (PROC(0) -> <> (FINAL(0) || ORPHANED(0))) }
/* With the reconciler running, no record stays processing forever. */
ltl processing_resolves { [] (PROC(0) -> <> !PROC(0)) }
