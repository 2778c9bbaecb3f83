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
 * Invariant:
 *   lock_issued_only   every fence a store accepts is one the lock granted: that token, that holder,
 *                      that resource
 *
 * Mutants:
 *   MUTANT_EXTEND_SIGNS_CLIENT_TOKEN  extend takes the token as the client wrote it: the lease id's
 *                                     seal does not cover the token (the unsealed id of the code
 *                                     before lease ids were sealed: "<token>.<value>.<resource>")
 *   MUTANT_PLAIN_TOKEN_ANY_KEY        a plain Fencing-Token header is taken from any API key, not
 *                                     only from trusted lock clients
 */

#define R 2          /* resources 1..R */
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

hidden byte lock_issued_only;

/* A fence reaches the store: the ratchet admits it or not. */
inline storeWrite(t, h, r) {
  if
  :: t > hiT[r] || (t == hiT[r] && h == hiH[r]) ->
     printf("MSC: the store accepts the fence (token %d, holder %d, resource %d)\n", t, h, r);
     lock_issued_only = ((granted & BIT(t, h, r)) != 0); assert(lock_issued_only);
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
