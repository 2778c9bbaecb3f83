/*
 * The stores' check (@fenced/store): whatever fences the lock hands out, as one atomic compare per
 * write.
 *
 * Leases are fences (resource, token, holder): each lease has its own holder id, and its resource and
 * token are chosen freely (tokens may repeat across leases: a lock that lost its counters). Several
 * processes may use one lease at once (concurrent requests of one holder).
 *
 * Layouts:
 *   default  FencedPostgres (sql.ts): a ratchet row per resource (highest token, its holder) and a
 *            record per key (owner, version, live or tombstone). Every write is one atomic step: the
 *            ratchet statement and the record statement commit together or not at all, ordered by
 *            the fence row's lock.
 *   S3       FencedS3: a manifest per key (owner, version, and per resource that has owned it the
 *            highest token and its holder), and a fence object per resource. A write is two atomic
 *            steps: the fence object's check (and raise: its own compare-and-swap), then the
 *            manifest's compare-and-swap, which decides owner, the key's ratchet entries and
 *            ifVersion on the manifest it replaces. Anything may happen in between: the window
 *            PROTOCOL.md describes.
 *   ONE_ROW  (PostgreSQL) with the one-row path beside today's write: the record of key R owned by
 *            resource R (its own key; here key k is resource k + 1's) carries a copy of R's fence row
 *            (token, holder; 0: none). A trigger on the fence table (fence_copy) sets it in the step of
 *            every raise of R's fence row, by any write, register, transfer or putAll of any instance,
 *            while R owns record R; a trigger on the records (fence_copy_owner) clears it when the
 *            owner changes; today's write of key R under R sets it to its fence (the new code) or
 *            leaves it (the old code, whose new records have none). A write of its fence's own key
 *            first sends the one-row statement: one step on the record alone, landing only where the
 *            copy is exactly the write's fence (with ifVersion, and the ordered put's `after`, as
 *            today's; no owner read: the copy stands for it), and leaving the fence row as it is; if
 *            it writes nothing, today's write follows as a later step of its own. Writes of other
 *            keys, putAll, and the unordered put (putShared: LATE_COMMIT, where the write order is
 *            modelled) are today's. The configurations without it are the two-row path alone (the
 *            code before it).
 *
 * Scenarios:
 *   default  ownership: two resources, two keys, three leases doing OPS operations in all: put,
 *            put with ifVersion (after a read), delete, register and transfer (to a lease of the
 *            other resource).
 *   UPDATES  read-modify-write: one resource, one key holding a number, two leases of which one
 *            runs two updates at once (SEPARATE_LEASES: three leases, one update each); every update
 *            follows the recipe: register on acquiring (unless NO_REGISTER), then read, add one, put
 *            with ifVersion, re-read and retry once on a version mismatch.
 *   LATE_COMMIT  (PostgreSQL) a write the store gave up on: one lease sends write 1 of a key (an
 *            ordered put, an unordered put, or a put or delete with ifVersion), gives up on it (its
 *            answer lost or late), and writes the key again (write 2: an unordered put, a put with
 *            ifVersion, or an ordered put sent again unordered when refused as out of order). The
 *            key was last written at the lease's own fence or at another. Write 1's statement runs at
 *            the server at any point after it was sent. Its commit (the Sync) travels with it for the
 *            conditional writes and the ordered put (commit-at.ts, COMMIT_AT "with-statement"): it
 *            commits whenever it runs. An ordered put (putOrdered, write-order.ts) carries `after`, a
 *            version seen before it was sent (any, or none), and is refused when the record is at
 *            exactly its fence with a newer version. For the unordered put the Sync leaves only once
 *            the statement's answer is in ("after-answer"): run after the client gave up, the
 *            statement finds its connection closed and is rolled back. (A late register, also
 *            "with-statement", writes no record; what it does to the ratchet is a register like any
 *            other, which the other scenarios check.)
 *   SETS     (PostgreSQL) a lease of two resources: lease 1 holds a fence on each of resources 1 and
 *            2 (one holder, a token each), leases 2 and 3 one fence each (any resource, any token);
 *            OPS operations in all. Lease 1 calls putAll (one or two records, keys 0 and 1, each under
 *            the fence of the resource it names) or register of both fences; leases 2 and 3 put a
 *            key or register. A call of several fences is one step, as every PostgreSQL write: every
 *            ratchet raised and checked in one statement (ratchetAll), then the records in key order,
 *            inside one transaction that any refusal rolls back.
 *   With ONE_ROW: every write of an own key (ownership: key 0 by resource 1, key 1 by 2; UPDATES and
 *   LATE_COMMIT: every write; SETS: leases 2 and 3's) takes the one-row path first. Ownership fixes
 *   lease 1's resource to 1 (a symmetry: resources and their own keys swapped). LATE_COMMIT: write 1,
 *   unless the unordered put, runs as its one-row statement, committing whenever it runs, and, only
 *   if that wrote nothing, as today's statement at any later point; write 2's ordered put and put with
 *   ifVersion go one-row first; the key last written at the lease's own fence has the fence row at
 *   it, and the copy at it or none. SETS: putAll's records are today's; its raises and registerSet's
 *   keep both copies, and a record it creates gets its fence or none.
 *
 * Invariants (PROTOCOL.md), named in the assertions:
 *   ratchet               the tokens accepted for a resource never decrease (S3: per key; with
 *                         ACROSS_KEYS also across the keys of a resource, which the window breaks)
 *   one_lease_per_token   two different leases are never both accepted at one token of a resource
 *   one_resource_per_key  no write under one resource changes a key another resource owns; only a
 *                         transfer from the owner moves it
 *   no_lost_update        (UPDATES) every acknowledged update is in the value
 *   no_late_overwrite     (LATE_COMMIT) a holder's acknowledged later write is never overwritten by
 *                         its earlier one
 *   set_whole             (SETS) a call of several fences lands whole or not at all: every record
 *                         written and every ratchet raised to its fence, each fence admitted by its
 *                         resource's ratchet as it stood; or no record and no ratchet changed. So no
 *                         record lands that either resource's ratchet refuses
 *
 * Mutants:
 *   MUTANT_EQUAL_TOKEN_ANY_HOLDER  an equal token is accepted from any holder
 *   MUTANT_NO_OWNER_CHECK          a write under any resource takes the key over (the layout before owners)
 *   MUTANT_SPLIT_COMPARE           the ratchet is read and checked in one step and written in another
 *   MUTANT_TRANSFER_SKIPS_TO       transfer checks only the from resource's ratchet, and raises both
 *   MUTANT_NO_IFVERSION            updates are written without ifVersion (the ratchet alone)
 *   MUTANT_PUT_SYNC_WITH_STATEMENT the put's commit is sent with its statement, like the others'
 *   MUTANT_PUT_KEEPS_VERSION       an unconditional write keeps the record's version (no new one from the sequence)
 *   MUTANT_ORDERED_PUT_NO_CHECK    an ordered put lands whatever version the record at its fence has
 *   MUTANT_SET_CHECKS_FIRST_FENCE  a call of several fences checks the first fence's ratchet only (and
 *                                  raises both)
 *   MUTANT_SET_NOT_ATOMIC          putAll's ratchets and records each commit by themselves: a refused
 *                                  record leaves the ones before it written
 *   With ONE_ROW:
 *   MUTANT_COPY_NOT_KEPT           raises leave the copy as it is (fence_copy missing or disabled)
 *   MUTANT_TRANSFER_KEEPS_COPY     transfer leaves the copy as it is (fence_copy_owner missing)
 *   MUTANT_ONE_ROW_ANY_HOLDER      the one-row write compares the copy's token only, not its holder
 *   MUTANT_ONE_ROW_NO_ORDER_CHECK  (LATE_COMMIT) a one-row ordered put lands whatever version the
 *                                  record at its fence has
 */

#if defined(SETS) && (defined(S3) || defined(UPDATES) || defined(LATE_COMMIT))
#error "SETS is a PostgreSQL scenario of its own (FencedS3 writes one fence per call)"
#endif
#if defined(ONE_ROW) && defined(S3)
#error "ONE_ROW is FencedPostgres's: the record's copy of its fence row (FencedS3 has no such path)"
#endif
#if defined(LATE_COMMIT)
#define R 1
#define K 1
#define LEASES 1
#elif defined(UPDATES)
#define R 1
#define K 1
#ifdef SEPARATE_LEASES
#define LEASES 3
#else
#define LEASES 2
#endif
#else
#define R 2
#define K 2
#define LEASES 3
#endif
#ifndef T
#define T 2          /* tokens 1..T */
#endif
#ifndef OPS
#define OPS 3        /* operations in all (ownership scenario), by any of the leases */
#endif

/* leases: resource, token; the holder id is the lease's number */
byte resOf[LEASES + 1];
byte tokOf[LEASES + 1];

/* the store. Ratchets: FencedPostgres per resource; FencedS3 per key and resource (the manifest's
   entries), and the fence object per resource. */
byte hiT[R + 1];
byte hiH[R + 1];
#ifdef S3
byte entT[K * (R + 1)];
byte entH[K * (R + 1)];
#endif
byte owner[K];       /* 0: no record (never written) */
byte ver[K];         /* 0: no record */
bit live[K];         /* a live record, not a tombstone */
byte seq;            /* versions handed out (a sequence, or fresh write ids: never repeated) */
#ifdef LATE_COMMIT
byte recT[K];        /* the fence (token, holder) of the record's last write */
byte recH[K];
#endif
#ifdef ONE_ROW
/* the record's copy of its own resource's fence row (fence_token, fence_holder; 0: none): key k's own
   resource is k + 1 (OWN_KEY). Kept by the triggers: while non-zero, it equals that fence row and the
   record is owned by that resource. */
byte cpT[K];
byte cpH[K];
#endif
#ifdef UPDATES
byte val[K];
#endif

/* ghosts */
byte maxAcc[R + 1];              /* the highest token accepted for a resource */
byte firstAt[(R + 1) * (T + 1)]; /* the first holder accepted at a resource's token */
byte gOwner[K];                  /* the owner as creations and transfers decided it */
#ifdef S3
byte maxKey[K * (R + 1)];        /* the highest token accepted for a resource on a key */
#endif
#ifdef UPDATES
byte acked;                      /* updates acknowledged */
#endif

hidden byte ratchet, one_lease_per_token, one_resource_per_key, no_lost_update, no_late_overwrite, set_whole;

/*
 * CHECK(id, name, cond): the invariant `name` must hold here. ONLY_CHECK=<id> asserts that one alone
 * (a mutant breaks the invariant it targets; others may fail first otherwise).
 */
#ifndef ONLY_CHECK
#define ONLY_CHECK 0
#endif
#define CHECK(id, name, cond) name = (cond); if :: (ONLY_CHECK == 0 || ONLY_CHECK == id) -> assert(name) :: else fi
#define RATCHET 1
#define ONE_LEASE_PER_TOKEN 2
#define ONE_RESOURCE_PER_KEY 3
#define NO_LOST_UPDATE 4
#define NO_LATE_OVERWRITE 5
#define SET_WHOLE 6

#define ADMITS_PAIR(ht, hh, t, h) (t > ht || (t == ht && h == hh))
#ifdef MUTANT_EQUAL_TOKEN_ANY_HOLDER
#define ADMITS(ht, hh, t, h) (t >= ht)
#else
#define ADMITS(ht, hh, t, h) ADMITS_PAIR(ht, hh, t, h)
#endif
#define ENT(k, r) ((k) * (R + 1) + (r))
#ifdef MUTANT_NO_OWNER_CHECK
#define OWNER_IGNORED 1
#else
#define OWNER_IGNORED 0
#endif


/*
 * An ordered put (putOrdered) refused as out of order: `after` — a variable of the calling process, 0
 * for a write without the check, else 1 + the version it comes after (1: none seen) — is not above the
 * version of a record at exactly its fence.
 */
#if defined(LATE_COMMIT) && !defined(MUTANT_ORDERED_PUT_NO_CHECK)
#define OUT_OF_ORDER(k, t, h) (after > 0 && recT[k] == t && recH[k] == h && ver[k] >= after)
#else
#define OUT_OF_ORDER(k, t, h) 0
#endif
#ifdef LATE_COMMIT
#define ON_RECORD(k, t, h) recT[k] = t; recH[k] = h
#else
#define ON_RECORD(k, t, h) skip
#endif

#ifdef ONE_ROW
#if K != R
#error "ONE_ROW: every resource has its own key (K == R)"
#endif
/* the own key of resource r, whose record carries the copy of r's fence row (key === fence.resource) */
#define OWN_KEY(r) ((r) - 1)
/* the one-row write lands only at exactly the copy: this fence, this holder */
#ifdef MUTANT_ONE_ROW_ANY_HOLDER
#define COPY_IS(k, t, h) (cpT[k] == t)
#else
#define COPY_IS(k, t, h) (cpT[k] == t && cpH[k] == h)
#endif
/* and is refused as out of order as putOrdered is (its `after` check, on the record alone) */
#ifdef MUTANT_ONE_ROW_NO_ORDER_CHECK
#define ONE_ROW_OUT_OF_ORDER(k, t, h) 0
#else
#define ONE_ROW_OUT_OF_ORDER(k, t, h) OUT_OF_ORDER(k, t, h)
#endif
#endif

#define LANDED 1
#define STALE 2
#define FOREIGN 3
#define MISMATCH 4

#ifdef UPDATES
/* an update lands: the value read plus one, acknowledged */
#define ON_LAND(k) val[k] = rv + 1; acked++; CHECK(NO_LOST_UPDATE, no_lost_update, val[k] == acked)
#else
#define ON_LAND(k) skip
#endif

/* Ghost checks for a fence (r, t, h) accepted by the store. */
inline accepted(r, t, h) {
#ifndef S3
  CHECK(RATCHET, ratchet, t >= maxAcc[r]);
#elif defined(ACROSS_KEYS)
  CHECK(RATCHET, ratchet, t >= maxAcc[r]);
#endif
  CHECK(ONE_LEASE_PER_TOKEN, one_lease_per_token, firstAt[r * (T + 1) + t] == 0 || firstAt[r * (T + 1) + t] == h);
  if :: firstAt[r * (T + 1) + t] == 0 -> firstAt[r * (T + 1) + t] = h :: else fi;
  if :: t > maxAcc[r] -> maxAcc[r] = t :: else fi
}

#ifdef S3
/* Ghost check for a fence accepted on key k's manifest entry of resource r. */
inline acceptedOnKey(k, r, t) {
  CHECK(RATCHET, ratchet, t >= maxKey[ENT(k, r)]);
  maxKey[ENT(k, r)] = t
}
#endif

/* Ghost check for a write under resource r that changes key k. */
inline changes(k, r) {
  CHECK(ONE_RESOURCE_PER_KEY, one_resource_per_key, gOwner[k] == 0 || gOwner[k] == r);
  if :: gOwner[k] == 0 -> gOwner[k] = r :: else fi
}

/* -------- the resource-wide ratchet -------- */

/* FencedPostgres: the ratchet statement (part of the write's one step). FencedS3: the fence object's
   check and raise, a step of its own, before the manifest's. Sets ok. */
inline fenceCheck(r, t, h) {
  ok = ADMITS(hiT[r], hiH[r], t, h)
}
inline fenceRaise(r, t, h) {
  hiT[r] = t; hiH[r] = h
#if defined(ONE_ROW) && !defined(MUTANT_COPY_NOT_KEPT)
  /* the trigger fence_copy, in the raise's step: the copy follows every raise of r's fence row, by
     any writer (old code too), while r's own key is a record that r owns (copy == the fence row) */
  ; if :: owner[OWN_KEY(r)] == r -> cpT[OWN_KEY(r)] = t; cpH[OWN_KEY(r)] = h :: else fi
#endif
}

/* register(fence): the ratchet alone */
inline register(r, t, h) {
  atomic {
    fenceCheck(r, t, h);
    if
    :: ok -> printf("MSC: lease %d (resource %d, token %d) registers\n", h, r, t); accepted(r, t, h); fenceRaise(r, t, h)
    :: else -> printf("MSC: lease %d (resource %d, token %d) registers: refused, stale\n", h, r, t)
    fi;
    ok = 0
  }
}

/*
 * put / delete (value: 0 a tombstone, 1 a live record), conditional on version e when cond. A delete
 * always writes a tombstone, also over a tombstone or as a key's first write (which the deleting
 * resource then owns). The refusals, in order: stale fence, another owner, version mismatch; each
 * changes nothing.
 */
inline write(k, r, t, h, value, cond, e) {
#ifdef S3
  /* the fence object's check, and raise (its own compare-and-swap) */
  atomic {
    fenceCheck(r, t, h);
    if :: ok && t > hiT[r] -> fenceRaise(r, t, h) :: else fi;
    printf("MSC: lease %d (resource %d, token %d) reads the fence object (token %d, lease %d): admitted %d\n", h, r, t, hiT[r], hiH[r], ok)
  }
  /* ... the window: anything may happen here ... then the manifest's compare-and-swap */
  atomic {
    if
    :: ok ->
       ok = ADMITS(entT[ENT(k, r)], entH[ENT(k, r)], t, h)
    :: else
    fi;
#elif defined(MUTANT_SPLIT_COMPARE)
  atomic {
    fenceCheck(r, t, h);
    printf("MSC: lease %d (resource %d, token %d) reads the ratchet (token %d, lease %d): admitted %d\n", h, r, t, hiT[r], hiH[r], ok)
  }
  atomic {
#else
  atomic {
    fenceCheck(r, t, h);
#endif
    if
    :: !ok -> res = STALE; printf("MSC: lease %d (resource %d, token %d) writes key %d: refused, stale\n", h, r, t, k)
#ifndef MUTANT_NO_OWNER_CHECK
    :: ok && owner[k] != 0 && owner[k] != r ->
       res = FOREIGN; printf("MSC: lease %d (resource %d, token %d) writes key %d: refused, owned by resource %d\n", h, r, t, k, owner[k])
#endif
    :: ok && (owner[k] == 0 || owner[k] == r || OWNER_IGNORED) && ((cond && !(live[k] && ver[k] == e)) || OUT_OF_ORDER(k, t, h)) ->
       res = MISMATCH; printf("MSC: lease %d (resource %d, token %d) writes key %d: refused, version mismatch\n", h, r, t, k)
    :: ok && (owner[k] == 0 || owner[k] == r || OWNER_IGNORED) && !(cond && !(live[k] && ver[k] == e)) && !OUT_OF_ORDER(k, t, h) ->
       res = LANDED;
       printf("MSC: lease %d (resource %d, token %d) writes key %d: lands, version %d, live %d\n", h, r, t, k, seq + 1, value);
       accepted(r, t, h);
#ifdef S3
       acceptedOnKey(k, r, t);
       entT[ENT(k, r)] = t; entH[ENT(k, r)] = h;
#else
       fenceRaise(r, t, h);
#endif
       changes(k, r);
#ifdef MUTANT_PUT_KEEPS_VERSION
       owner[k] = r; if :: cond || ver[k] == 0 -> seq++; ver[k] = seq :: else fi; live[k] = value;
#else
       owner[k] = r; seq++; ver[k] = seq; live[k] = value;
#endif
#ifdef ONE_ROW
       /* the record's copy: on r's own key, the write's fence (the fence row it just raised) by the
          new code, or left as it was by the old (a record it creates has none). On another key: none
          (fence_copy_owner clears it if the owner changed, which only MUTANT_NO_OWNER_CHECK does) */
       if
       :: k == OWN_KEY(r) ->
          if
          :: cpT[k] = t; cpH[k] = h
          :: printf("MSC: (old code: key %d's copy left as it was, token %d, lease %d)\n", k, cpT[k], cpH[k])
          fi
       :: else -> cpT[k] = 0; cpH[k] = 0
       fi;
#endif
       ON_RECORD(k, t, h);
       ON_LAND(k)
    fi;
    ok = 0
  }
}

#ifdef ONE_ROW
/*
 * The one-row write (putOwn, putOwnIfVersion, deleteOwn, deleteOwnIfVersion in own-sql.ts) of lease h
 * of resource r on r's own key k: one statement on the record alone. It lands only where the record's
 * copy is exactly this fence, and with ifVersion and the ordered put's `after` as today's write would;
 * it writes the record and leaves the fence row as it is. It does not look at the owner, nor at the
 * fence row: the copy stands for both (a copy is r's fence row, on a record r owns), which is what the
 * invariants check. Otherwise it writes nothing (res = 0), and the store falls back to today's write.
 */
inline oneRow(k, r, t, h, value, cond, e) {
  atomic {
    if
    :: COPY_IS(k, t, h) && !(cond && !(live[k] && ver[k] == e)) && !ONE_ROW_OUT_OF_ORDER(k, t, h) ->
       res = LANDED;
       printf("MSC: lease %d (resource %d, token %d) writes key %d on its one row: lands, version %d, live %d\n", h, r, t, k, seq + 1, value);
       accepted(r, t, h);
       changes(k, r);
#ifdef MUTANT_PUT_KEEPS_VERSION
       if :: cond -> seq++; ver[k] = seq :: else fi; live[k] = value;
#else
       seq++; ver[k] = seq; live[k] = value;
#endif
       ON_RECORD(k, t, h);
       ON_LAND(k)
    :: else ->
       res = 0;
       printf("MSC: lease %d (resource %d, token %d) writes key %d on its one row: nothing written (owner %d, copy token %d, lease %d)\n", h, r, t, k, owner[k], cpT[k], cpH[k])
    fi
  }
}
#endif

/*
 * The store's write of key k under lease h of resource r: on r's own key, the one-row write first, and
 * if it wrote nothing, today's write as a later step of its own (anything may happen in between);
 * on any other key, today's write.
 */
inline writeKey(k, r, t, h, value, cond, e) {
#ifdef ONE_ROW
  if
  :: k == OWN_KEY(r) ->
     oneRow(k, r, t, h, value, cond, e);
     if :: res != LANDED -> write(k, r, t, h, value, cond, e) :: else fi
  :: k != OWN_KEY(r) -> write(k, r, t, h, value, cond, e)
  fi
#else
  write(k, r, t, h, value, cond, e)
#endif
}

/*
 * transfer(k, { from, to }): one step (FencedPostgres: both ratchets locked in one statement, then the
 * record, in one transaction; FencedS3: both fence objects, then one manifest compare-and-swap): both
 * fences admitted, the key live or a tombstone and owned by from's resource; both ratchets raised, the
 * owner becomes to's resource.
 */
inline transfer(k, fr, ft, fh, tr, tt, th) {
#ifdef S3
  atomic {
    fenceCheck(fr, ft, fh);
    if :: ok && ft > hiT[fr] -> fenceRaise(fr, ft, fh) :: else fi;
    if
    :: ok -> fenceCheck(tr, tt, th);
             if :: ok && tt > hiT[tr] -> fenceRaise(tr, tt, th) :: else fi
    :: else
    fi
  }
  atomic {
    if
    :: ok -> ok = ADMITS(entT[ENT(k, fr)], entH[ENT(k, fr)], ft, fh) && ADMITS(entT[ENT(k, tr)], entH[ENT(k, tr)], tt, th)
    :: else
    fi;
#else
  atomic {
    fenceCheck(fr, ft, fh);
#ifndef MUTANT_TRANSFER_SKIPS_TO
    if :: ok -> fenceCheck(tr, tt, th) :: else fi;
#endif
#endif
    if
    :: ok && owner[k] == fr ->
       printf("MSC: transfer of key %d from lease %d (resource %d, token %d) to lease %d (resource %d, token %d): lands\n", k, fh, fr, ft, th, tr, tt);
       accepted(fr, ft, fh); accepted(tr, tt, th);
#ifdef S3
       acceptedOnKey(k, fr, ft); acceptedOnKey(k, tr, tt);
       entT[ENT(k, fr)] = ft; entH[ENT(k, fr)] = fh; entT[ENT(k, tr)] = tt; entH[ENT(k, tr)] = th;
#else
       fenceRaise(fr, ft, fh); fenceRaise(tr, tt, th);
#endif
       CHECK(ONE_RESOURCE_PER_KEY, one_resource_per_key, gOwner[k] == fr);
       gOwner[k] = tr; owner[k] = tr; seq++; ver[k] = seq
#if defined(ONE_ROW) && !defined(MUTANT_TRANSFER_KEEPS_COPY)
       /* the trigger fence_copy_owner: a new owner, no copy (the ratchets were raised, and fence_copy
          fired, while from's resource still owned the key) */
       ; cpT[k] = 0; cpH[k] = 0
#endif
    :: else -> printf("MSC: transfer of key %d from lease %d to lease %d: refused\n", k, fh, th)
    fi;
    ok = 0
  }
}

#ifdef LATE_COMMIT

#define PUT 1
#define PUT_IF_VERSION 2
#define DELETE_IF_VERSION 3
#define PUT_ORDERED 4
/* Whether a write of this kind can commit after its client gave up: its Sync went with the statement. */
#ifdef MUTANT_PUT_SYNC_WITH_STATEMENT
#define COMMITS_LATE(kind) 1
#else
#define COMMITS_LATE(kind) (kind != PUT)
#endif

byte kind1;      /* write 1's kind */
byte e1;         /* the version write 1 expects (read before it was sent) */
byte after1;     /* write 1's `after` when ordered: 1 + a version seen before it was sent, any (1: none) */
bit sent1;       /* write 1 has left the client */
bit gaveUp;      /* the client has given up on write 1: no Sync follows it any more */
bit acked2;      /* write 2 is acknowledged */

/* The client: write 1 sent, given up on, then write 2. */
proctype Client() {
  byte r, t, e, ok, res, after;
  r = resOf[1]; t = tokOf[1];
  atomic {
    e1 = ver[0]; select(after1 : 1 .. ver[0] + 1); sent1 = 1;
    printf("MSC: lease 1 sends write 1 (kind %d, expecting version %d, after %d)\n", kind1, e1, after1 - 1)
  };
  gaveUp = 1; printf("MSC: lease 1 gives up on write 1\n");
  /* (ONE_ROW: the unordered put, putShared, has no one-row statement; the others try it first) */
  if
  :: write(0, r, t, 1, 1, 0, 0)
  :: atomic { e = ver[0] }; writeKey(0, r, t, 1, 1, 1, e)
  /* an ordered put, after any version seen (or none); refused as out of order, sent again unordered */
  :: atomic { select(after : 1 .. ver[0] + 1) }; writeKey(0, r, t, 1, 1, 0, 0);
     if :: res == MISMATCH -> after = 0; write(0, r, t, 1, 1, 0, 0) :: else fi
  fi;
  if :: res == LANDED -> acked2 = 1; printf("MSC: write 2 acknowledged\n") :: else fi
}

/* The server running write 1's statement, once, at any point after it was sent. */
proctype Statement1() {
  byte r, t, ok, res, after;
  r = resOf[1]; t = tokOf[1];
  sent1;
#ifdef ONE_ROW
  /* key 0 is resource 1's own: the ordered put and the conditional writes send the one-row statement
     first, its commit with it (commit-at.ts: every one-row statement commits whenever it runs; the
     ordered put's carries `after`); only if it wrote nothing, today's statement, at any later point
     (even once the client gave up, which the store does not send then: more runs, none fewer). The
     unordered put (putShared) has none. */
  if
  :: kind1 != PUT ->
     atomic {
       if
       :: kind1 == PUT_ORDERED -> after = after1; oneRow(0, r, t, 1, 1, 0, 0)
       :: kind1 == PUT_IF_VERSION -> oneRow(0, r, t, 1, 1, 1, e1)
       :: kind1 == DELETE_IF_VERSION -> oneRow(0, r, t, 1, 0, 1, e1)
       fi;
       CHECK(NO_LATE_OVERWRITE, no_late_overwrite, res != LANDED || !acked2);
       after = 0;
       if :: res == LANDED -> goto statement1Done :: else fi
     }
  :: else
  fi;
#endif
  atomic {
    if
    :: COMMITS_LATE(kind1) || !gaveUp ->
       if
       :: kind1 == PUT -> write(0, r, t, 1, 1, 0, 0)
       :: kind1 == PUT_ORDERED -> after = after1; write(0, r, t, 1, 1, 0, 0)
       :: kind1 == PUT_IF_VERSION -> write(0, r, t, 1, 1, 1, e1)
       :: kind1 == DELETE_IF_VERSION -> write(0, r, t, 1, 0, 1, e1)
       fi;
       CHECK(NO_LATE_OVERWRITE, no_late_overwrite, res != LANDED || !acked2)
    :: else -> printf("MSC: write 1 runs after its client gave up: its connection is closed, rolled back\n")
    fi
  }
#ifdef ONE_ROW
statement1Done: skip
#endif
}

#elif defined(UPDATES)

/* read-modify-write: register on acquiring, then read, add one, put with ifVersion; retry once */
proctype Updater(byte h) {
  byte r, t, tries, e, rv, ok, res;
  r = resOf[h]; t = tokOf[h];
#ifndef NO_REGISTER
  register(r, t, h);
#endif
  do
  :: tries < 2 ->
     tries++;
     atomic { e = ver[0]; rv = val[0]; printf("MSC: lease %d (resource %d, token %d) reads key 0: value %d, version %d\n", h, r, t, rv, e) };
#ifdef MUTANT_NO_IFVERSION
     writeKey(0, r, t, h, 1, 0, e);
#else
     writeKey(0, r, t, h, 1, 1, e);
#endif
     if
     :: res != MISMATCH -> tries = 2
     :: else
     fi;
     e = 0; rv = 0; res = 0
  :: else -> break
  od
}

#elif defined(SETS)

/*
 * Lease 1 of the set {1, 2}: tokOf[1] is its token for resource 1, setTok2 its token for resource 2,
 * and its holder id is 1 for both (a set has one value, so one holder).
 */
byte setTok2;
#define SET_TOKEN(r) (r == 1 -> tokOf[1] : setTok2)

/* ghosts of the call of several fences in progress (each used within its one atomic step) */
hidden byte admits1, admits2;          /* each fence admitted by its ratchet as it stood, by the rule */
hidden byte was1T, was1H, was2T, was2H; /* the ratchets before the call */
hidden byte landed;                    /* records written by the call */

/* Before a call of several fences: what each ratchet (admits, as specified) says of its fence. */
inline setBefore(h) {
  admits1 = ADMITS_PAIR(hiT[1], hiH[1], tokOf[1], h); admits2 = ADMITS_PAIR(hiT[2], hiH[2], setTok2, h);
  was1T = hiT[1]; was1H = hiH[1]; was2T = hiT[2]; was2H = hiH[2]; landed = 0
}

/* After it: n records written and both ratchets at the call's fences, both admitted; or nothing changed. */
#define SET_LANDED(n, h) (landed == n && admits1 && admits2 && hiT[1] == tokOf[1] && hiH[1] == h && hiT[2] == setTok2 && hiH[2] == h)
#define SET_UNCHANGED (landed == 0 && hiT[1] == was1T && hiH[1] == was1H && hiT[2] == was2T && hiH[2] == was2H)

/* ratchetAll (sql.ts; raiseAll in batch.ts): both fences, in lock order (resource 1 first). Sets ok. */
inline ratchetAll(h) {
  fenceCheck(1, tokOf[1], h);
#ifndef MUTANT_SET_CHECKS_FIRST_FENCE
  if :: ok -> fenceCheck(2, setTok2, h) :: else fi
#endif
}
inline raiseBoth(h) {
  accepted(1, tokOf[1], h); fenceRaise(1, tokOf[1], h);
  accepted(2, setTok2, h); fenceRaise(2, setTok2, h)
}

/* register(fences) of both: the ratchets alone, all or none (ratchetAll in the call's transaction). */
inline registerSet(h) {
  atomic {
    setBefore(h);
    ratchetAll(h);
    if
    :: ok -> printf("MSC: lease %d registers (resource 1, token %d) and (resource 2, token %d)\n", h, tokOf[1], setTok2); raiseBoth(h)
    :: else -> printf("MSC: lease %d registers both fences: refused, stale\n", h)
    fi;
    CHECK(SET_WHOLE, set_whole, SET_LANDED(0, h) || SET_UNCHANGED);
    ok = 0
  }
}

/* A record of putAll refused: another resource owns key k (r: the resource the record names, 0: no record). */
#define FOREIGN_RECORD(k, r) (r != 0 && owner[k] != 0 && owner[k] != r)

/* One record of putAll under its resource's fence: written (putRecord), or the call refused. */
inline setRecord(k, r, h) {
  if
  :: res == LANDED && r != 0 && FOREIGN_RECORD(k, r) ->
     res = FOREIGN; printf("MSC: putAll's record of key %d: refused, owned by resource %d\n", k, owner[k])
  :: res == LANDED && r != 0 && !FOREIGN_RECORD(k, r) ->
     printf("MSC: putAll writes key %d under resource %d (token %d), version %d\n", k, r, SET_TOKEN(r), seq + 1);
     changes(k, r); owner[k] = r; seq++; ver[k] = seq; live[k] = 1; landed++
#ifdef ONE_ROW
     /* the copy: the raises came first (fence_copy set it if r owned its own key k already); a record
        putAll creates gets the fence, or none (either code) */
     ; if :: k == OWN_KEY(r) -> if :: cpT[k] = SET_TOKEN(r); cpH[k] = h :: skip fi :: else fi
#endif
  :: else
  fi
}

/*
 * putAll(writes, { fences }) of lease h's two fences: key 0 under resource r0 and key 1 under r1 (0:
 * no record of that key). One step: putAllOrdered, or after its refusal the transaction of raiseAll
 * and putRecord (batch.ts), which decide alike; any refusal rolls back every record and raise.
 */
inline putAll(h, r0, r1) {
  atomic {
    printf("MSC: lease %d putAll under (resource 1, token %d) and (resource 2, token %d): key 0 under resource %d, key 1 under resource %d (0: none)\n", h, tokOf[1], setTok2, r0, r1);
    setBefore(h);
    ratchetAll(h);
    if
    :: ok -> res = LANDED
    :: else -> res = STALE; printf("MSC: lease %d putAll: refused, stale\n", h)
    fi;
#ifdef MUTANT_SET_NOT_ATOMIC
    /* the ratchets commit, then each record by itself */
    if :: res == LANDED -> raiseBoth(h) :: else fi;
    setRecord(0, r0, h); setRecord(1, r1, h);
#else
    /* the transaction: a refused record (the first in key order) leaves nothing written */
    if
    :: res == LANDED && (FOREIGN_RECORD(0, r0) || FOREIGN_RECORD(1, r1)) ->
       res = FOREIGN; printf("MSC: lease %d putAll: refused, a key owned by another resource\n", h)
    :: else
    fi;
    if :: res == LANDED -> raiseBoth(h) :: else fi;
    setRecord(0, r0, h); setRecord(1, r1, h);
#endif
    CHECK(SET_WHOLE, set_whole, SET_LANDED((r0 != 0) + (r1 != 0), h) || SET_UNCHANGED);
    ok = 0; res = 0
  }
}

byte ops;

/* lease 1, of both resources: putAll of one or two records, or register, OPS operations in all with the others' */
proctype SetHolder() {
  byte r0, r1, ok, res;
  do
  :: atomic { ops < OPS -> ops++ };
     if
     :: registerSet(1)
     :: if :: r0 = 0 :: r0 = 1 :: r0 = 2 fi;
        if :: r1 = 1 :: r1 = 2 :: r0 != 0 -> r1 = 0 fi;
        putAll(1, r0, r1)
     fi;
     r0 = 0; r1 = 0
  :: else -> break
  od
}

/* a lease of one resource: put a key, or register */
proctype Holder(byte h) {
  byte r, t, k, ok, res;
  r = resOf[h]; t = tokOf[h];
  do
  :: atomic { ops < OPS -> ops++ };
     if
     :: k = 0; writeKey(k, r, t, h, 1, 0, 0)
     :: k = 1; writeKey(k, r, t, h, 1, 0, 0)
     :: register(r, t, h)
     fi;
     k = 0; res = 0
  :: else -> break
  od
}

#else

/* a lease holder: operations of any kind, on any key, OPS in all */
byte ops;
proctype Holder(byte h) {
  byte r, t, k, e, ok, res;
  r = resOf[h]; t = tokOf[h];
  do
  :: atomic { ops < OPS -> ops++ };
     if :: k = 0 :: k = 1 fi;
     if
     :: writeKey(k, r, t, h, 1, 0, 0)
     :: writeKey(k, r, t, h, 0, 0, 0)
     :: atomic { live[k] -> e = ver[k] }; writeKey(k, r, t, h, 1, 1, e); e = 0
     :: register(r, t, h)
     :: resOf[(h % LEASES) + 1] != r ->
        transfer(k, r, t, h, resOf[(h % LEASES) + 1], tokOf[(h % LEASES) + 1], (h % LEASES) + 1)
     fi;
     k = 0; res = 0
  :: else -> break
  od
}

#endif

init {
  byte h, x;
  atomic {
    /* every lease's resource and token, in every combination */
#ifdef SETS
    /* lease 1 holds both resources: a token for each */
    select(x : 1 .. T); tokOf[1] = x;
    select(x : 1 .. T); setTok2 = x;
    h = 2;
#else
    h = 1;
#endif
    do
    :: h <= LEASES ->
#if defined(ONE_ROW) && !defined(LATE_COMMIT) && !defined(UPDATES) && !defined(SETS)
       /* lease 1's resource is 1: swapping resources 1 and 2 together with keys 0 and 1 (their own
          keys) maps every run onto one of these, and keeps every invariant (half the states) */
       if :: h == 1 -> x = 1 :: else -> select(x : 1 .. R) fi; resOf[h] = x;
#else
       select(x : 1 .. R); resOf[h] = x;
#endif
       select(x : 1 .. T); tokOf[h] = x;
       h++
    :: else -> h = 0; x = 0; break
    od;
#if defined(LATE_COMMIT)
    /* the key exists, the lease's resource's; write 1 of each kind */
    owner[0] = resOf[1]; gOwner[0] = resOf[1]; seq = 1; ver[0] = 1; live[0] = 1;
    /* last written at the lease's own fence, or at another (an older lease's) */
#ifdef ONE_ROW
    /* at the lease's own fence, the fence row is that fence, and the record's copy that fence (new
       code) or none (old code); at another, no copy */
    if
    :: recT[0] = tokOf[1]; recH[0] = 1; hiT[1] = tokOf[1]; hiH[1] = 1;
       if :: cpT[0] = tokOf[1]; cpH[0] = 1 :: skip fi
    :: recT[0] = 0; recH[0] = 0
    fi;
#else
    if :: recT[0] = tokOf[1]; recH[0] = 1 :: recT[0] = 0; recH[0] = 0 fi;
#endif
    select(x : PUT .. PUT_ORDERED); kind1 = x; x = 0;
    run Client(); run Statement1()
#elif defined(UPDATES)
    /* the key exists, written by no lease */
    owner[0] = 1; gOwner[0] = 1; seq = 1; ver[0] = 1; live[0] = 1;
#ifdef SEPARATE_LEASES
    run Updater(1); run Updater(2); run Updater(3)
#else
    run Updater(1); run Updater(1); run Updater(2)
#endif
#elif defined(SETS)
    run SetHolder(); run Holder(2); run Holder(3)
#else
    run Holder(1); run Holder(2); run Holder(3)
#endif
  }
}
