/*
 * The lock (@fenced/lock) and the storage ratchet behind it, for one resource.
 *
 * N = 3 independent Redis nodes, each with a lease key (the lease value holding it, 0: none) and a
 * counter. CLIENTS clients each make ROUNDS acquisitions; every acquisition draws a fresh lease value
 * (the random value of the code: unique, never reused), which is also its holder id at the store.
 * Each Redis script is one atomic step on one node (Redis runs a script atomically); a client can be
 * interleaved with anything else between two of its scripts, which is how a client paused for any
 * length is modelled.
 *
 * Faults, decided when a script runs on a node (Redis, too, expires keys lazily: nothing can tell a
 * key that vanished earlier from one that vanishes just before the next script reads it):
 *   - the lease key is gone (its TTL ran out, the node's wall clock jumped, its holder was paused);
 *   - with COUNTER_LOSS, the counter is back at any lower value (a node restarted without its data,
 *     or from an old snapshot);
 *   - a call of a fan-out is answered, or runs and its reply is lost, or never arrives (with
 *     NO_LOST_REPLIES: answered, or never arrives);
 *   - with OTHERS > 0, up to OTHERS scripts of clients this model does not follow: an ACQUIRE that
 *     found no key (the counter up one, the key theirs or gone), perhaps with their PUBLISH (up one
 *     more). It is also what one of our ACQUIREs does when it lands after its fan-out resolved.
 * A client sends its calls in any order (with FIXED_ORDER: node 0, 1, 2).
 * Every lease that was handed out then writes to the store, up to WRITES times, in any order: the
 * store's check (one atomic compare, as in FencedPostgres's ratchet statement and FencedS3's manifest
 * compare-and-swap) reads nothing the lock writes, so any interleaving of writes with lock steps
 * shows the store the same sequence of fences as one where the writes come last, in the same order.
 * A write may come after its lease expired or was released (a paused holder, a copy of its fence).
 *
 * Invariants (PROTOCOL.md), named in the assertions:
 *   tokens_unique, tokens_increase   "The lock: tokens over N independent Redis nodes": no two
 *                                    leases share a token; a lease whose acquisition started after
 *                                    another returned token t has a token above t. Asserted while no
 *                                    counter was lost (with ASSERT_LOCK_AFTER_LOSS: always).
 *   one_lease_per_token              two different leases never both write at one token.
 *   ratchet                          the tokens the store accepts never decrease.
 *
 * Mutants (each removes the rule that keeps one invariant; the check expects a counterexample):
 *   MUTANT_PUBLISH_COUNTS_UNMOVED    PUBLISH counts a node whose counter is at or above t, whoever
 *                                    moved it there
 *   MUTANT_EQUAL_TOKEN_ANY_HOLDER    the store accepts a token equal to its highest from any holder
 */

#define N 3
#define QUORUM 2
#ifndef CLIENTS
#define CLIENTS 2
#endif
#ifndef ROUNDS
#define ROUNDS 1
#endif
#ifndef WRITES
#define WRITES 1
#endif
#define LEASES (CLIENTS * ROUNDS)
#if LEASES > 4
#error "at most 4 leases (the store phase in init names them)"
#endif
#define MAXT 16            /* tokens stay below this (asserted) */
#ifndef OTHERS
#define OTHERS 0           /* scripts run by clients beyond these (their leases are not followed) */
#endif
#define OTHER 255          /* the lease value of such a client: none of ours */

#ifdef ASSERT_LOCK_AFTER_LOSS
#define ASSERT_LOCK_ALWAYS 1
#else
#define ASSERT_LOCK_ALWAYS 0
#endif

/*
 * CHECK(id, name, cond): the invariant `name` must hold here. ONLY_CHECK=<id> asserts that one alone
 * (a mutant breaks the invariant it targets; others may fail first otherwise).
 */
#ifndef ONLY_CHECK
#define ONLY_CHECK 0
#endif
#define CHECK(id, name, cond) name = (cond); if :: (ONLY_CHECK == 0 || ONLY_CHECK == id) -> assert(name) :: else fi
#define TOKENS_UNIQUE 1
#define TOKENS_INCREASE 2
#define ONE_LEASE_PER_TOKEN 3
#define RATCHET 4

byte counter[N];
byte key[N];               /* the lease value holding the lease key, 0: no key */
byte tokenOf[LEASES + 1];  /* the token of each lease handed out, 0: none */

/* the store's ratchet for the resource: the highest token accepted and its holder */
byte hi;
byte hiHolder;

/* ghosts: what the invariants are judged on (the protocol never reads them) */
bit lost;                  /* some node lost a counter value */
byte others;               /* scripts of other clients so far */
int issued;                /* bit t: token t handed out */
byte maxAccepted;          /* the highest token the store accepted */
byte writerAt[MAXT];       /* the holder of the first write accepted at token t */

hidden byte tokens_unique, tokens_increase, one_lease_per_token, ratchet, bounded;

/* What may have happened at node i before a script runs there. */
inline faultsAt(i) {
  if
  :: key[i] != 0 -> printf("MSC: node %d: the key of lease %d is gone\n", i, key[i]); key[i] = 0
  :: true
  fi;
#if OTHERS > 0
  /* scripts of clients not followed here: an ACQUIRE that found no key (INCR; the key is theirs,
     or gone again), perhaps followed by their PUBLISH (the counter raised once more) */
  if
  :: others < OTHERS && key[i] == 0 ->
     others++; counter[i]++;
     if
     :: counter[i] + 1 < MAXT -> counter[i]++
     :: true
     fi;
     if
     :: key[i] = OTHER
     :: true
     fi;
     printf("MSC: node %d: another client's ACQUIRE (and PUBLISH): counter %d\n", i, counter[i])
  :: true
  fi;
#endif
#ifdef COUNTER_LOSS
  if
  :: counter[i] > 0 ->
     select(x : 0 .. counter[i] - 1);
     printf("MSC: node %d: counter lost, %d -> %d\n", i, counter[i], x);
     counter[i] = x; x = 0; lost = 1
  :: true
  fi
#endif
  skip
}

/* ACQUIRE (scripts.ts): SET lease value NX, and only if that succeeded, INCR counter. */
inline acquireScript(i) {
  faultsAt(i);
  if
  :: key[i] == 0 -> key[i] = v; counter[i]++; g = 1
  :: else -> g = 0
  fi
}

/*
 * The client's tally of the answers (AcquireTally and chooseToken in quorum.ts), kept as it comes:
 * gmax the highest counter among the granting nodes, top the granting nodes at gmax, below the
 * granting nodes under it, rmax1 one past the highest counter a refusing node reported (0: none).
 */
inline tally(i) {
  if
  :: g && counter[i] > gmax -> below = below | top; top = (1 << i); gmax = counter[i]
  :: g && counter[i] == gmax -> top = top | (1 << i)
  :: g && counter[i] < gmax -> below = below | (1 << i)
  :: !g && counter[i] + 1 > rmax1 -> rmax1 = counter[i] + 1
  :: else
  fi
}

#define COUNT(m) ((m & 1) + ((m >> 1) & 1) + ((m >> 2) & 1))

/* One call of the ACQUIRE fan-out: answered, or it ran and its reply was lost, or it never arrived. */
inline sendAcquire(i) {
  atomic {
    sent = sent | (1 << i);
    if
    :: true -> acquireScript(i);
       printf("MSC: lease %d: ACQUIRE at node %d: %d, counter %d\n", v, i, g, counter[i]);
       tally(i)
#ifndef NO_LOST_REPLIES
    :: true -> acquireScript(i);
       printf("MSC: lease %d: ACQUIRE at node %d ran (%d, counter %d), its reply is lost\n", v, i, g, counter[i])
#endif
    :: true -> printf("MSC: lease %d: ACQUIRE to node %d never arrives\n", v, i)
    fi;
    g = 0
  }
}

/*
 * PUBLISH (scripts.ts): while this node still holds this lease's value, raise the counter to t if
 * it is lower; the reply says whether this call moved it to exactly t.
 */
inline publishScript(i) {
  faultsAt(i);
  if
  :: key[i] == v && counter[i] < t -> counter[i] = t; g = 1
  :: else -> g = 0
  fi;
#ifdef MUTANT_PUBLISH_COUNTS_UNMOVED
  if
  :: counter[i] >= t -> g = 1
  :: else
  fi
#endif
}

/* One call of the PUBLISH fan-out: answered, or it ran and its reply was lost, or it never arrived. */
inline sendPublish(i) {
  atomic {
    top = top & ~(1 << i);
    if
    :: true -> publishScript(i); counted = counted + g;
       printf("MSC: lease %d: PUBLISH %d at node %d: counts %d, counter %d\n", v, t, i, g, counter[i])
#ifndef NO_LOST_REPLIES
    :: true -> publishScript(i);
       printf("MSC: lease %d: PUBLISH %d at node %d ran, its reply is lost\n", v, t, i)
#endif
    :: true -> printf("MSC: lease %d: PUBLISH to node %d never arrives\n", v, i)
    fi;
    g = 0
  }
}

/*
 * RELEASE (scripts.ts) on every node: delete the lease key only where it holds this lease's value.
 * One step: deleting one's own keys is what a fault may do at any time anyway.
 */
inline releaseAll() {
  atomic {
    i = 0;
    do
    :: i < N -> if :: key[i] == v -> key[i] = 0 :: else fi; i++
    :: else -> i = 0; break
    od
  }
}

proctype Client(byte c) {
  byte round, v, t, floor, sent, top, below, counted, g, i, x, gmax, rmax1;

  do
  :: round < ROUNDS ->
     round++;
     /* the lease's random value (unique: drawn fresh); the ghost floor: the highest token handed
        out before this acquisition starts */
     atomic {
       v = c * ROUNDS + round;
       i = MAXT - 1;
       do
       :: i > 0 && (issued & (1 << i)) == 0 -> i--
       :: else -> floor = i; i = 0; break
       od
     }

     /* 1. ACQUIRE on all nodes at once: the calls land in any order */
     do
     :: (sent & 1) == 0 -> sendAcquire(0)
#ifdef FIXED_ORDER
     :: (sent & 3) == 1 -> sendAcquire(1)
     :: (sent & 7) == 3 -> sendAcquire(2)
#else
     :: (sent & 2) == 0 -> sendAcquire(1)
     :: (sent & 4) == 0 -> sendAcquire(2)
#endif
     :: sent == 7 ->
        /* 2.-3. chooseToken (quorum.ts): with a quorum of grants, t is the maximum counter among
           the granting nodes, or one past a refusing node above all of them; a granting node
           counts only if its own INCR returned exactly t; those behind t may be published to */
        atomic {
          sent = 0;
          if
          :: COUNT(top | below) >= QUORUM && rmax1 > gmax + 1 -> t = rmax1; counted = 0; top = top | below
          :: COUNT(top | below) >= QUORUM && rmax1 <= gmax + 1 -> t = gmax; counted = COUNT(top); top = below
          :: else -> t = 0; top = 0
          fi;
          below = 0; gmax = 0; rmax1 = 0
        };
        break
     od;

     /* 4. fewer than a quorum counts: PUBLISH t to the granting nodes that are behind; the fan-out
        resolves as soon as a quorum counts */
     do
     :: t > 0 && counted < QUORUM && (top & 1) -> sendPublish(0)
     :: t > 0 && counted < QUORUM && (top & 2) -> sendPublish(1)
     :: t > 0 && counted < QUORUM && (top & 4) -> sendPublish(2)
     :: else -> top = 0; break
     od;

     if
     :: t > 0 && counted >= QUORUM ->
        /* 5. validity left: the lease is handed out */
        atomic {
          printf("MSC: lease %d (client %d) is handed out with token %d\n", v, c, t);
          bounded = (t < MAXT); assert(bounded);
          if
          :: !lost || ASSERT_LOCK_ALWAYS ->
             CHECK(TOKENS_UNIQUE, tokens_unique, (issued & (1 << t)) == 0);
             CHECK(TOKENS_INCREASE, tokens_increase, t > floor)
          :: else
          fi;
          issued = issued | (1 << t);
          tokenOf[v] = t;
          counted = 0; floor = 0
        }
        /* EXTEND (scripts.ts) only re-arms the TTL of keys that hold this value: it changes no
           state here, where keys may vanish at any time anyway. Then RELEASE, or let it expire. */
        if
        :: releaseAll()
        :: skip
        fi
     :: else ->
        /* no quorum counts, or no validity left: release everywhere (also where no answer came) */
        counted = 0; floor = 0; releaseAll()
     fi;
     t = 0; v = 0
  :: else -> break
  od
}

/*
 * The store's check and write, one atomic step: admitted iff the token is above the highest, or
 * equal to it and from the same holder (admits() in @fenced/fence).
 */
#ifdef MUTANT_EQUAL_TOKEN_ANY_HOLDER
#define ADMITS(tok, holder) (tok > hi || tok == hi)
#else
#define ADMITS(tok, holder) (tok > hi || (tok == hi && holder == hiHolder))
#endif

inline storeWrite(w) {
  atomic {
    t = tokenOf[w];
    if
    :: ADMITS(t, w) ->
       printf("MSC: the store accepts token %d from lease %d\n", t, w);
       CHECK(RATCHET, ratchet, t >= maxAccepted);
       CHECK(ONE_LEASE_PER_TOKEN, one_lease_per_token, writerAt[t] == 0 || writerAt[t] == w);
       writerAt[t] = w; maxAccepted = t; hi = t; hiHolder = w
    :: else ->
       printf("MSC: the store refuses token %d from lease %d (highest %d, from lease %d)\n", t, w, hi, hiHolder)
    fi;
    writes[w]++; t = 0
  }
}

init {
  byte c, t;
  byte writes[LEASES + 1];
  atomic {
    do
    :: c < CLIENTS -> run Client(c); c++
    :: else -> c = 0; break
    od
  }
  /* once every client is done: every lease handed out writes, up to WRITES times, in any order */
  _nr_pr == 1;
  do
  :: tokenOf[1] != 0 && writes[1] < WRITES -> storeWrite(1)
  :: tokenOf[2] != 0 && writes[2] < WRITES -> storeWrite(2)
#if LEASES > 2
  :: tokenOf[3] != 0 && writes[3] < WRITES -> storeWrite(3)
#endif
#if LEASES > 3
  :: tokenOf[4] != 0 && writes[4] < WRITES -> storeWrite(4)
#endif
  :: break
  od
}
