/*
 * The gateway's trust (@fenced/gateway): a write's fence comes only from a credential the gateway
 * signed, and the gateway signs only what the lock granted.
 *
 * Sealing (HMAC-SHA256 under the gateway's fence keys, lease-id.ts and credentials.ts over
 * packages/fence/src/sealed.ts) is modelled as the set of payloads the gateway has sealed, one set per
 * domain (lease ids, credentials): a sealed string verifies iff its payload is in its domain's set,
 * since a MAC cannot be made without the key, and only one spelling of each verifies. Every instance
 * holds the same keys, so one set stands for all of them. A client may send anything: any token,
 * value and resource in a lease id or a credential, edited from what it was given or made up.
 *
 * The lock is abstracted to what the lock model checks: each grant is a fresh lease value with a
 * token above every earlier one; its key (per resource, holding the value) may vanish at any time.
 *
 * Scenarios:
 *   default  leases of one resource (fl1 lease ids), two resources.
 *   SETS     leases of any set of three resources (one value, a token per resource, a credential per
 *            resource), whose ids are fl1 for one resource and fl2 for several: the id seals the
 *            value and every resource with its token. The lock's EXTEND of a set acts only where every
 *            key of the set holds the value (all or none), RELEASE on every key of the set that holds
 *            it; a key may vanish at any time. The client presents any value, any set and any tokens.
 *            The gateway seals one payload per lease (an extension seals the same value and fences
 *            again, with a new end, which the model leaves out), so the sealed ids are the grants.
 *
 * Invariants:
 *   lock_issued_only   every fence a store accepts is one the lock granted: that token, that holder,
 *                      that resource
 *   one_set_per_id     (SETS) every extend and release the gateway asks of the lock names exactly the
 *                      lease the lock granted under the id's value: all its resources, each with its
 *                      token, and no other. A set's id is never extended or released as another set
 *                      ({A, B} as {A, C}), as a part of it ({A, B} as A), or the other way round
 *
 * Mutants:
 *   MUTANT_EXTEND_SIGNS_CLIENT_TOKEN  extend takes the token as the client wrote it: the lease id's
 *                                     seal does not cover the token (the unsealed id of the code
 *                                     before lease ids were sealed: "<token>.<value>.<resource>")
 *   MUTANT_PLAIN_TOKEN_ANY_KEY        a plain Fencing-Token header is taken from any API key, not
 *                                     only from trusted lock clients
 *   MUTANT_SET_ID_SEALS_VALUE_ONLY    (SETS) an fl2 id's MAC covers its value (and end) only: the
 *                                     resources and tokens after it are taken as written (fl1 ids
 *                                     stay sealed whole)
 *   MUTANT_SET_ID_ANY_SUBSET          (SETS) an id's fences are checked one by one against the sealed
 *                                     ones: any part of a set passes (each fence presented is sealed)
 */

#ifdef SETS
#define R 3          /* resources 1..R */
#else
#define R 2
#endif
#define V 2          /* lease values 1..V: the lock grants at most V leases */
#define T 3          /* tokens 1..T; the lock grants at most V of them, so T is one it never issues */
#ifndef STEPS
#define STEPS 4      /* requests the client sends */
#endif

/* a payload (token, value or holder, resource) as a bit of a set */
#define BIT(t, v, r) (1 << (((t) - 1) * V * R + ((v) - 1) * R + ((r) - 1)))

int sealedIds;       /* lease ids the gateway sealed */
int signedCreds;     /* credentials the gateway signed (the holder is the value's holder id) */
int granted;         /* ghost: the leases the lock granted */
byte heldBy[V + 1];  /* the resource whose lease key holds value v on a quorum, 0: none */
byte lastToken, lastValue;
/* the store's ratchet, per resource */
byte hiT[R + 1], hiH[R + 1];

hidden byte lock_issued_only, one_set_per_id;

/*
 * CHECK(id, name, cond): the invariant `name` must hold here. ONLY_CHECK=<id> asserts that one alone
 * (a mutant breaks the invariant it targets; others may fail first otherwise).
 */
#ifndef ONLY_CHECK
#define ONLY_CHECK 0
#endif
#define CHECK(id, name, cond) name = (cond); if :: (ONLY_CHECK == 0 || ONLY_CHECK == id) -> assert(name) :: else fi
#define LOCK_ISSUED_ONLY 1
#define ONE_SET_PER_ID 2

/* A fence reaches the store: the ratchet admits it or not. */
inline storeWrite(t, h, r) {
  if
  :: t > hiT[r] || (t == hiT[r] && h == hiH[r]) ->
     printf("MSC: the store accepts the fence (token %d, holder %d, resource %d)\n", t, h, r);
     CHECK(LOCK_ISSUED_ONLY, lock_issued_only, (granted & BIT(t, h, r)) != 0);
     hiT[r] = t; hiH[r] = h
  :: else -> printf("MSC: the store refuses the fence (token %d, holder %d, resource %d)\n", t, h, r)
  fi
}

/* POST /v1/leases: the lock grants a lease; the gateway seals its id and signs its credential. */
inline acquire(r) {
  lastToken++; lastValue++;
  granted = granted | BIT(lastToken, lastValue, r);
  heldBy[lastValue] = r;
  sealedIds = sealedIds | BIT(lastToken, lastValue, r);
  signedCreds = signedCreds | BIT(lastToken, lastValue, r);
  printf("MSC: POST /v1/leases: the lock grants (token %d, value %d, resource %d)\n", lastToken, lastValue, r)
}

/* Whether the gateway unseals lease id (t, v, r): the MAC covers every field. */
#ifdef MUTANT_EXTEND_SIGNS_CLIENT_TOKEN
#define UNSEALS(t, v, r) ((sealedIds & (BIT(1, v, r) | BIT(2, v, r) | BIT(3, v, r))) != 0)
#else
#define UNSEALS(t, v, r) ((sealedIds & BIT(t, v, r)) != 0)
#endif

/*
 * POST /v1/leases/extend with lease id (t, v, r): unsealed, the lock's EXTEND confirms that a
 * quorum still holds v for r (the nodes keep the value, not the token), and the gateway seals a new
 * id and signs a new credential with the token, value and resource of the id.
 */
inline extend(t, v, r) {
  if
  :: UNSEALS(t, v, r) && heldBy[v] == r ->
     sealedIds = sealedIds | BIT(t, v, r);
     signedCreds = signedCreds | BIT(t, v, r);
     printf("MSC: POST /v1/leases/extend with the lease id (token %d, value %d, resource %d): a credential of it\n", t, v, r)
  :: else -> printf("MSC: POST /v1/leases/extend with the lease id (token %d, value %d, resource %d): refused\n", t, v, r)
  fi
}

/* POST /v1/leases/release: the RELEASE script deletes the keys holding the id's value. */
inline release(t, v, r) {
  if
  :: UNSEALS(t, v, r) && heldBy[v] == r -> heldBy[v] = 0
  :: else
  fi
}

/* PUT with Fencing-Credential (t, h, r): the fence is taken from the credential once it verifies. */
inline write(t, h, r) {
  if
  :: (signedCreds & BIT(t, h, r)) != 0 ->
     printf("MSC: PUT with the credential (token %d, holder %d, resource %d)\n", t, h, r);
     storeWrite(t, h, r)
  :: else -> printf("MSC: credential (token %d, holder %d, resource %d) refused: invalid-credential\n", t, h, r)
  fi
}

/* PUT with a plain Fencing-Token from an API key that is not a trusted lock client. */
inline plainWrite(t, h, r) {
#ifdef MUTANT_PLAIN_TOKEN_ANY_KEY
  printf("MSC: PUT with Fencing-Token %d, -Holder %d, -Resource %d from an ordinary API key\n", t, h, r);
  storeWrite(t, h, r)
#else
  printf("MSC: plain Fencing-Token refused: credential-required\n")
#endif
}

#ifdef SETS

/*
 * The leases, by value: the resources the lock granted under v (a bit per resource, 0: not granted)
 * and each one's token. The gateway sealed exactly these as lease ids: fl1 when one bit is set, fl2
 * otherwise (so neither format's payload is the other's).
 */
byte setOf[V + 1];
byte tokenOf[(V + 1) * (R + 1)];
#define TOKEN(v, r) tokenOf[(v) * (R + 1) + (r)]
#define IN(S, r) (((S) >> ((r) - 1)) & 1)
byte lastTokenOf[R + 1];  /* the lock's counter per resource */
byte keysOf[V + 1];       /* the resources whose lease key holds value v on a quorum */

/* Whether the presented fence of resource r (token pt[r]) is the sealed one of value v. */
#define SEALED_FENCE(v, r) (!IN(S, r) || (IN(setOf[v], r) && TOKEN(v, r) == pt[r]))
#define SEALED_FENCES(v) (SEALED_FENCE(v, 1) && SEALED_FENCE(v, 2) && SEALED_FENCE(v, 3))

/* Whether the gateway unseals the id (value v, resources S, tokens pt): the MAC covers every field. */
#define SEVERAL(S) (IN(S, 1) + IN(S, 2) + IN(S, 3) >= 2)
#if defined(MUTANT_SET_ID_SEALS_VALUE_ONLY)
#define UNSEALS_SET(v) ((SEVERAL(S) && SEVERAL(setOf[v])) || (setOf[v] == S && SEALED_FENCES(v)))
#elif defined(MUTANT_SET_ID_ANY_SUBSET)
#define UNSEALS_SET(v) (setOf[v] != 0 && SEALED_FENCES(v))
#else
#define UNSEALS_SET(v) (setOf[v] == S && SEALED_FENCES(v))
#endif

/* The id names the lease granted under v, whole: what the gateway may ask the lock to extend or release. */
#define ITS_SET(v) (S == setOf[v] && SEALED_FENCES(v))

/* POST /v1/leases with resources S: one value, a token per resource, a credential per resource, one id. */
inline acquireSet() {
  lastValue++; setOf[lastValue] = S; keysOf[lastValue] = S;
  r = 1;
  do
  :: r <= R && IN(S, r) ->
     lastTokenOf[r]++; TOKEN(lastValue, r) = lastTokenOf[r];
     granted = granted | BIT(lastTokenOf[r], lastValue, r);
     signedCreds = signedCreds | BIT(lastTokenOf[r], lastValue, r);
     printf("MSC: POST /v1/leases: the lock grants value %d, resource %d at token %d\n", lastValue, r, lastTokenOf[r]);
     r++
  :: r <= R && !IN(S, r) -> r++
  :: else -> r = 0; break
  od
}

/*
 * POST /v1/leases/extend with the id (value v, resources S, tokens pt): unsealed, the lock's EXTEND
 * confirms that every key of the set holds v, and the gateway signs a credential per resource with
 * the id's token, value and resource.
 */
inline extendSet(v) {
  if
  :: UNSEALS_SET(v) ->
     printf("MSC: POST /v1/leases/extend with the id (value %d; tokens of resources 1, 2, 3: %d %d %d, 0 not in the id): unsealed\n", v, pt[1], pt[2], pt[3]);
     CHECK(ONE_SET_PER_ID, one_set_per_id, ITS_SET(v));
     if
     :: (keysOf[v] & S) == S ->
        r = 1;
        do
        :: r <= R && IN(S, r) -> signedCreds = signedCreds | BIT(pt[r], v, r); r++
        :: r <= R && !IN(S, r) -> r++
        :: else -> r = 0; break
        od
     :: else -> printf("MSC: the lock refuses the extension: lease-lost\n")
     fi
  :: else -> printf("MSC: POST /v1/leases/extend with the id (value %d; tokens of resources 1, 2, 3: %d %d %d, 0 not in the id): invalid-lease-id\n", v, pt[1], pt[2], pt[3])
  fi
}

/* POST /v1/leases/release: the RELEASE script deletes every key of the set holding the id's value. */
inline releaseSet(v) {
  if
  :: UNSEALS_SET(v) ->
     printf("MSC: POST /v1/leases/release with the id (value %d; tokens of resources 1, 2, 3: %d %d %d, 0 not in the id): unsealed\n", v, pt[1], pt[2], pt[3]);
     CHECK(ONE_SET_PER_ID, one_set_per_id, ITS_SET(v));
     keysOf[v] = keysOf[v] & (7 - S)
  :: else
  fi
}

active proctype Client() {
  byte n, op, t, v, r, S;
  byte pt[R + 1];  /* the tokens of the id presented, per resource */
  do
  :: n < STEPS ->
     n++;
     select(op : 1 .. 5);
     atomic {
       if
       :: op == 1 && lastValue < V -> select(S : 1 .. 7); acquireSet()
       :: op == 2 || op == 3 ->
          /* an id: any value, any set of resources, any token for each */
          select(v : 1 .. V); select(S : 1 .. 7);
          if :: IN(S, 1) -> select(t : 1 .. T); pt[1] = t :: else fi;
          if :: IN(S, 2) -> select(t : 1 .. T); pt[2] = t :: else fi;
          if :: IN(S, 3) -> select(t : 1 .. T); pt[3] = t :: else fi;
          if :: op == 2 -> extendSet(v) :: else -> releaseSet(v) fi
       :: op == 4 || op == 5 ->
          select(t : 1 .. T); select(v : 1 .. V); select(r : 1 .. R);
          if :: op == 4 -> write(t, v, r) :: else -> plainWrite(t, v, r) fi
       :: else
       fi;
       op = 0; t = 0; v = 0; r = 0; S = 0; pt[1] = 0; pt[2] = 0; pt[3] = 0
     }
  :: else -> break
  od
}

/* A lease key may vanish at any time (its TTL, a clock jump). */
#define VANISHES(v, r) atomic { IN(keysOf[v], r) -> keysOf[v] = keysOf[v] - (1 << ((r) - 1)) }
active proctype Expiry() {
end:
  do
  :: VANISHES(1, 1)
  :: VANISHES(1, 2)
  :: VANISHES(1, 3)
  :: VANISHES(2, 1)
  :: VANISHES(2, 2)
  :: VANISHES(2, 3)
  od
}

#else

active proctype Client() {
  byte n, op, t, v, r;
  do
  :: n < STEPS ->
     n++;
     /* the request, and its fields: anything the client cares to send */
     select(op : 1 .. 5); select(t : 1 .. T); select(v : 1 .. V); select(r : 1 .. R);
     atomic {
       if
       :: op == 1 && lastValue < V -> acquire(r)
       :: op == 2 -> extend(t, v, r)
       :: op == 3 -> release(t, v, r)
       :: op == 4 -> write(t, v, r)
       :: op == 5 -> plainWrite(t, v, r)
       :: else
       fi;
       op = 0; t = 0; v = 0; r = 0
     }
  :: else -> break
  od
}

/* A lease key may vanish at any time (its TTL, a clock jump). */
active proctype Expiry() {
end:
  do
  :: atomic { heldBy[1] != 0 -> heldBy[1] = 0 }
  :: atomic { heldBy[2] != 0 -> heldBy[2] = 0 }
  od
}

#endif
