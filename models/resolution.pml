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
 * The lifecycle itself (which event moves which status where) is NOT written here: it comes
 * from confirmation_table.pml, generated from the python-statemachine class.
 *
 * Options:  -DNO_RESUME   the reconciler only completes or releases orphaned records
 *           -DNO_RELEASE  the reconciler never releases (release_untouched=False, the default)
 *           -DINFLIGHT    an unknown save may still be travelling and land later
 *           -DANY_INTENT  every client may approve, reject or expire (else a fixed intent each)
 * Seeded protocol bugs (each must produce a counterexample; see models/check.py):
 *   -DBUG_UPSTREAM_FIRST   call upstream before the claim is saved
 *   -DBUG_TERMINAL_FIRST   save the terminal status before upstream returns
 *   -DBUG_LWW              the register ignores the expected cursor (last write wins)
 *   -DBUG_RELEASE_LIVE     the reconciler releases a claim whose claimant is still alive
 *   -DBUG_NO_NONCE         an unknown save is settled by comparing snapshots without a nonce
 *   -DBUG_NO_FENCE         a resume calls upstream without first re-saving the claim (the
 *                          protocol before ADR-0054's fix; needs -DINFLIGHT to show)
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
/* Which upstream call a claim leads to (REFERENCE 3.3: expiry denies). */
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

/* Apply one write to the register (the compare already passed).  claimant: the client that
 * will act on a claim it just wrote (0: nobody, e.g. the host or a write landing late). */
inline apply_write(i, expect, newst, writer, claimant) {
  if
  :: IS_FINAL(reg_st[i]) && newst != reg_st[i] -> bad_sticky = true
  :: else -> skip
  fi;
  if
  :: IS_FINAL(newst) && !(up_acted[i] && up_kind[i] == KIND_OF(newst)) -> bad_false = true
  :: else -> skip
  fi;
  if
  :: newst == ST_PENDING -> called[i] = false       /* a release starts a new claim */
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
  assert(reg_cursor == CURSOR0 + applied);
#endif
  skip
}

#ifdef INFLIGHT
/* One write whose request is still travelling: it may land later, or never (ADR-0066). */
bool fly = false;
byte fly_i, fly_expect, fly_st, fly_writer;
byte fly_claimant;           /* ghost: the writer, until it gives the write up */

active proctype Network() {
end_net:
  do
  :: atomic {
       fly ->
       if
       :: reg_cursor == fly_expect ->
          apply_write(fly_i, fly_expect, fly_st, fly_writer, fly_claimant)
       :: else -> skip                               /* it lands and is refused */
       fi;
       fly = false; fly_i = 0; fly_expect = 0; fly_st = 0; fly_writer = 0; fly_claimant = 0
     }
  od
}
#endif

/* Register write, atomic with the compare.  writer: the write's nonce (client id; 0 for the
 * reconciler's release/complete, RFENCE for its resume fence).  claimant: who becomes the live
 * owner of a processing status it writes (the writer for a client claim, 0 for a fence). */
inline cas_save_as(i, expect, newst, writer, claimant, res) {
  atomic {
    if
#ifdef INFLIGHT
    :: unknowns < MAXUNKNOWN ->           /* the request is still on its way: unknown now */
       unknowns++; res = SAVE_UNKNOWN;
       fly = true; fly_i = i; fly_expect = expect; fly_st = newst; fly_writer = writer;
       fly_claimant = claimant
#endif
    :: true ->
       if
#ifdef BUG_LWW
       :: true ->
#else
       :: reg_cursor == expect ->
#endif
          apply_write(i, expect, newst, writer, claimant);
          res = SAVE_OK
       :: else -> res = SAVE_CONFLICT
       fi;
       if
       :: unknowns < MAXUNKNOWN -> unknowns++; res = SAVE_UNKNOWN   /* reply lost */
       :: true -> skip
       fi
    fi
  }
}

#define cas_save(i, expect, newst, writer, res) cas_save_as(i, expect, newst, writer, writer, res)

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
    fi
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
#define DISOWN_ALL DISOWN(0); DISOWN(1)
#else
#define DISOWN_ALL DISOWN(0)
#endif

/* Optionally crash right after the step this ends (which is the same as crashing before the
 * next one).  A crash loses every local variable; the client restarts from scratch. */
#define MAYBE_CRASH \
  if \
  :: crashes < MAXCRASH -> crashes++; crashed = true; DISOWN_ALL \
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
          fi;
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

proctype Client(byte me) {
  byte ops = 0, i, cur, claim, fin, res, up;
  bool crashed;
restart:
  atomic { crashed = false; i = 0; cur = 0; claim = 0; fin = 0; res = 0; up = 0 };
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
       fsm_next(reg_st[i], fin, clock_past, claim);
       fin = 0;
       MAYBE_CRASH
     };
     ON_CRASH;
     if
     :: claim == ST_NONE -> skip          /* processing/terminal/guarded: inert, no upstream */
     :: else ->
#ifdef BUG_UPSTREAM_FIRST
        atomic { upstream_call(i, claim, me, up); MAYBE_CRASH };
        ON_CRASH;
#endif
        atomic {                          /* CAS#1: the claim */
          cas_save(i, cur, claim, me, res);
          MAYBE_CRASH
        };
        ON_CRASH;
        if
        :: res == SAVE_UNKNOWN ->         /* settle by re-reading */
           atomic {
             if
             :: OURS(i, cur, claim) -> res = SAVE_OK
             :: else -> DISOWN(i)         /* not applied, or not provably ours: never call */
             fi;
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
     atomic { i = 0; cur = 0; claim = 0; fin = 0; res = 0; up = 0 }
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
     cas_save_as(i, cur, st, RFENCE, 0, res);
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

init {
  byte k = 1;
  atomic {
    do
    :: k <= NCLIENTS -> run Client(k); k++
    :: else -> break
    od
  }
}

/* Only one claim winner calls upstream, and no call contradicts what upstream did. */
ltl no_replay { [] !bad_replay }
/* DESIGN's wording: no approve/deny at all once upstream acted (holds with NO_RESUME only). */
ltl single_call { [] !bad_second }
ltl no_false_completion { [] !bad_false }
ltl terminal_immutable { [] !bad_sticky }
ltl cursor_exact { [] (reg_cursor == CURSOR0 + applied) }
/* A claimed record is eventually terminal, or orphaned (its claimant gone). */
ltl claim_settles { [] (PROC(0) -> <> (FINAL(0) || ORPHANED(0))) }
/* With the reconciler running, no record stays processing forever. */
ltl processing_resolves { [] (PROC(0) -> <> !PROC(0)) }
