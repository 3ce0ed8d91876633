/*
 * The confirmation resolution protocol of akchat-fsm, for SPIN.
 *
 * NCLIENTS clients resolve NCONF confirmations that live in ONE session envelope held by a
 * compare-and-set register (the SessionStorage port).  A resolution is: load -> claim save
 * (CAS#1, status approving/rejecting/expiring) -> upstream approve/deny -> terminal save
 * (CAS#2).  A client may crash between any two of those steps; any save may end "outcome
 * unknown" (applied or not, the client is not told); upstream may fail without acting or act
 * and lose its reply; a clock may pass expiresAt; a reconciler settles processing records
 * whose claimant is gone from the upstream tool-call status (release or complete).
 *
 * The lifecycle itself (which event moves which status where) is NOT written here: it comes
 * from confirmation_table.pml, generated from the python-statemachine class.
 *
 * Seeded protocol bugs (each must produce a counterexample; see models/check.py):
 *   -DBUG_UPSTREAM_FIRST   call upstream before the claim is saved
 *   -DBUG_TERMINAL_FIRST   save the terminal status before upstream returns
 *   -DBUG_LWW              the register ignores the expected cursor (last write wins)
 *   -DBUG_RECONCILE_LIVE   the reconciler does not wait for the claimant to be gone
 *   -DBUG_UNKNOWN_AS_WON   an unknown-outcome claim that re-reads as "claimed" is taken as won
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
#define MAXUNKNOWN 1     /* saves whose outcome the caller never learns, in total */
#endif
#ifndef MAXUPFAULT
#define MAXUPFAULT 1     /* upstream calls that fail or lose their reply, in total */
#endif

#define CURSOR0 1        /* the stored envelope the run starts from (proposed, cursor 1) */

#define SAVE_OK 0
#define SAVE_CONFLICT 1  /* definite refusal: save returned False */
#define SAVE_UNKNOWN 2   /* OutcomeUnknown: it may or may not have applied */

#define UP_OK 0          /* upstream acted and said so */
#define UP_LOST 1        /* upstream acted, the reply was lost */
#define UP_FAILED 2      /* upstream failed without acting */

#define K_NONE 0
#define K_APPROVE 1
#define K_DENY 2
/* Which upstream call a claim leads to (REFERENCE 3.3: expiry denies). */
#define KIND_OF(s) (((s) == ST_APPROVING || (s) == ST_APPROVED) -> K_APPROVE : K_DENY)

/* ---------------------------------------------------------------- the CAS register */
byte reg_cursor = CURSOR0;
byte reg_st[NCONF];          /* status of each confirmation binding; 0 is ST_PENDING */

/* ---------------------------------------------------------------- upstream (ChatMemory) */
bool up_acted[NCONF];        /* the tool call no longer requires confirmation */
byte up_kind[NCONF];         /* K_APPROVE / K_DENY: what upstream did */

/* ---------------------------------------------------------------- environment */
bool clock_past = false;     /* now() >= expiresAt (one expiresAt for every record) */
byte crashes = 0;
byte unknowns = 0;
byte upfaults = 0;

/* ---------------------------------------------------------------- ghosts (properties) */
byte applied = 0;            /* saves the register applied */
byte owner[NCONF];           /* client that holds the live claim (may still call upstream), 0: none */
bool bad_replay = false;     /* upstream called after it had acted */
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

#ifdef BUG_RECONCILE_LIVE
#define RECONCILABLE(i) (PROC(i))
#else
/* The host may reconcile a processing record only once its claimant can no longer call
 * upstream (crashed, gave up after an upstream error, or abandoned an unknown claim). */
#define RECONCILABLE(i) (PROC(i) && owner[i] == 0)
#endif

/* Register write, atomic with the compare.  writer: client id, 0 for the reconciler. */
inline cas_save(i, expect, newst, writer, res) {
  atomic {
    if
#ifdef BUG_LWW
    :: true ->
#else
    :: reg_cursor == expect ->
#endif
       if
       :: IS_FINAL(reg_st[i]) && newst != reg_st[i] -> bad_sticky = true
       :: else -> skip
       fi;
       if
       :: IS_FINAL(newst) && !(up_acted[i] && up_kind[i] == KIND_OF(newst)) -> bad_false = true
       :: else -> skip
       fi;
       reg_cursor = expect + 1;
       reg_st[i] = newst;
       applied++;
#ifdef ASSERTS
       assert(!bad_sticky);
       assert(!bad_false);
       assert(reg_cursor == CURSOR0 + applied);
#endif
       if
       :: IS_PROCESSING(newst) && writer != 0 -> owner[i] = writer
       :: else -> skip
       fi;
       res = SAVE_OK
    :: else -> res = SAVE_CONFLICT
    fi;
    if
    :: unknowns < MAXUNKNOWN -> unknowns++; res = SAVE_UNKNOWN
    :: true -> skip
    fi
  }
}

/* Upstream approve/deny for tool call i; st is the claimed processing status. */
inline upstream_call(i, st, res) {
  atomic {
    if
    :: up_acted[i] -> bad_replay = true;
#ifdef ASSERTS
       assert(!bad_replay)
#endif
    :: else -> skip
    fi;
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
#define DISOWN(i) if :: owner[i] == me -> owner[i] = 0 :: else -> skip fi

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

/* CAS#2: save the terminal status, re-reading and rebasing on conflict or unknown outcome. */
inline finish() {
  do
  :: atomic {
       fsm_next(claim, EV_COMPLETE, false, fin);
       cas_save(i, cur, fin, me, res);
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
        atomic {                          /* re-read to settle */
          cur = reg_cursor;
          if
          :: reg_st[i] == claim -> skip   /* still our live claim: retry on the new cursor */
          :: else -> res = SAVE_OK; DISOWN(i)   /* our unknown save had applied */
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
     atomic {                             /* load, reading the injected clock, and decide */
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
        atomic { upstream_call(i, claim, up); MAYBE_CRASH };
        ON_CRASH;
#endif
        atomic { cas_save(i, cur, claim, me, res); MAYBE_CRASH };   /* CAS#1: the claim */
        ON_CRASH;
        if
        :: res == SAVE_UNKNOWN ->         /* settle by re-reading */
           atomic {
#ifdef BUG_UNKNOWN_AS_WON
             if
             :: reg_st[i] == claim -> res = SAVE_OK
             :: else -> DISOWN(i)
             fi;
#else
             /* pending: it did not apply (retry is a new attempt).  Anything else is not
              * provably ours: never call upstream for it; reconciliation settles it. */
             DISOWN(i);
#endif
             MAYBE_CRASH
           };
           ON_CRASH
        :: else -> skip
        fi;
        if
        :: res == SAVE_OK ->
#ifdef BUG_TERMINAL_FIRST
           finish();
           atomic { upstream_call(i, claim, up); DISOWN(i) }
#else
#ifndef BUG_UPSTREAM_FIRST
           atomic {
             upstream_call(i, claim, up);
             if
             :: up != UP_OK -> DISOWN(i)  /* safety-biased: stays processing, never retried */
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
        :: else -> skip                   /* conflict: another writer won, nothing to do */
        fi
     fi;
     atomic { i = 0; cur = 0; claim = 0; fin = 0; res = 0; up = 0 }
  od
}

/* The host's reconciler: settles processing records whose claimant is gone, from the upstream
 * tool-call status (ChatMemory), with CAS.  It never calls upstream approve/deny. */
active proctype Reconciler() {
  byte i, cur, st, fin, res;
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
    :: else -> fsm_next(st, EV_RELEASE, false, fin)
    fi;
    st = 0
  };
  atomic {                                /* whatever the outcome: re-read, decide again */
    cas_save(i, cur, fin, 0, res);
    i = 0; cur = 0; fin = 0; res = 0
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

ltl no_replay { [] !bad_replay }
ltl no_false_completion { [] !bad_false }
ltl terminal_immutable { [] !bad_sticky }
ltl cursor_exact { [] (reg_cursor == CURSOR0 + applied) }
/* A claimed record is eventually terminal, or reconcilable (its claimant gone). */
ltl claim_settles { [] (PROC(0) -> <> (FINAL(0) || RECONCILABLE(0))) }
/* With the reconciler running, no record stays processing forever. */
ltl processing_resolves { [] (PROC(0) -> <> !PROC(0)) }
