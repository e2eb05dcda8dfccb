-- dlock's lock table on PostgreSQL and the functions that are its protocol, called by the
-- backend over libpq (lock_protocol.h). dlock_backend_prepare runs this file with
-- {{t}} replaced by the table's quoted name (table=, default dlock_locks), {{t_NAME}} by the
-- quoted name of the table's function NAME (table + "_" + NAME), {{channel}} by the table's
-- name as a string literal, and {{unlogged}} by "UNLOGGED " with unlogged=1. Every name and
-- value reaches these functions as a parameter.
--
-- One row per lock name (hold '', kind 'n') carries the name's fencing counter and is never
-- deleted; one row per hold (hold = the hold's public id) carries its kind, owner value (the
-- secret token [|label] that release, renew and extend must match), token, expiry and value.
-- Expiry is on the server's clock (clock_timestamp()); NULL never expires.
--
-- Fencing: an acquire locks its name's row (FOR UPDATE) before it reads the clock, and issues
-- max(counter + 1, clock in µs). The counter makes tokens rise while the table keeps its rows;
-- the clock floor makes them rise after the rows are lost (an unlogged table emptied by a
-- crash; a failover to a replica that missed the last commits), as long as the new server's
-- clock does not trail the old one's by more than the time the loss took.

CREATE {{unlogged}}TABLE IF NOT EXISTS {{t}} (
  name    text        NOT NULL,
  hold    text        NOT NULL,
  kind    "char"      NOT NULL,            -- 'n' the name's row, 'x' exclusive, 's' shared, 'p' permit,
                                           -- 'w' a waiting writer's announcement
  permits integer     NOT NULL DEFAULT 0,  -- a permit's semaphore size
  take    integer     NOT NULL DEFAULT 1,  -- the permits a hold takes
  owner   text        NOT NULL DEFAULT '',
  token   bigint      NOT NULL DEFAULT 0,  -- a hold's token; the name's row: the last one issued
  expires timestamptz,
  value   bytea,
  PRIMARY KEY (name, hold)
);

-- One try. acquired: fencing_token is the hold's. Refused: holder_ttl_ms is how long until the
-- first blocking hold may end (-1: one never expires), and why is '' or 'sort N' (the name is
-- held as a semaphore of N permits, or as a lock for N = 0, and this acquire asked for the
-- other: an error, not a refusal). An earlier try of the same hold whose answer was lost
-- answers acquired again, with its token.
--
-- Writer preference: an exclusive acquire refused with p_queue_ms > 0 (it will wait) leaves a
-- row of kind 'w' under its hold id for that long, and while one stands no new shared hold is
-- granted. The writer's next tries renew it; its acquire replaces it; a writer that gave up
-- leaves it to lapse.
CREATE OR REPLACE FUNCTION {{t_acquire}}(p_name text, p_hold text, p_kind "char", p_permits integer,
                                         p_take integer, p_owner text, p_lease_ms bigint, p_value bytea,
                                         p_queue_ms bigint DEFAULT 0)
RETURNS TABLE (acquired boolean, fencing_token bigint, holder_ttl_ms bigint, why text)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_last bigint;
  v_token bigint;
  v_sort integer;
  v_taken bigint;
  v_blocked boolean;
  v_until timestamptz;
  v_forever boolean;
BEGIN
  INSERT INTO {{t}} (name, hold, kind) VALUES (p_name, '', 'n') ON CONFLICT (name, hold) DO NOTHING;
  SELECT t.token INTO v_last FROM {{t}} t WHERE t.name = p_name AND t.hold = '' FOR UPDATE;
  v_now := clock_timestamp();
  DELETE FROM {{t}} t WHERE t.name = p_name AND t.hold <> '' AND t.expires <= v_now;

  SELECT t.token INTO v_token FROM {{t}} t
   WHERE t.name = p_name AND t.hold = p_hold AND t.owner = p_owner AND t.kind <> 'w';
  IF FOUND THEN
    RETURN QUERY SELECT true, v_token, NULL::bigint, ''::text;
    RETURN;
  END IF;

  -- What the name is while held: a semaphore of N (its permits' N), or a lock (0).
  SELECT max(CASE WHEN t.kind = 'p' THEN t.permits ELSE 0 END), coalesce(sum(t.take), 0)
    INTO v_sort, v_taken FROM {{t}} t WHERE t.name = p_name AND t.hold <> '' AND t.kind <> 'w';
  IF v_sort IS NOT NULL AND v_sort <> (CASE WHEN p_kind = 'p' THEN p_permits ELSE 0 END) THEN
    RETURN QUERY SELECT false, 0::bigint, NULL::bigint, 'sort ' || v_sort;
    RETURN;
  END IF;
  IF p_kind = 'x' THEN
    v_blocked := v_sort IS NOT NULL;
  ELSIF p_kind = 's' THEN
    v_blocked := EXISTS (SELECT 1 FROM {{t}} t WHERE t.name = p_name AND (t.kind = 'x' OR t.kind = 'w'));
  ELSE
    v_blocked := v_taken + p_take > p_permits;
  END IF;
  IF v_blocked THEN
    IF p_kind = 'x' AND p_queue_ms > 0 THEN
      INSERT INTO {{t}} (name, hold, kind, owner, expires)
        VALUES (p_name, p_hold, 'w', p_owner, v_now + p_queue_ms * interval '1 millisecond')
        ON CONFLICT (name, hold) DO UPDATE SET expires = excluded.expires WHERE {{t}}.kind = 'w';
    END IF;
    SELECT min(t.expires), bool_or(t.expires IS NULL) INTO v_until, v_forever
      FROM {{t}} t WHERE t.name = p_name AND t.hold <> '' AND t.hold <> p_hold
                     AND (t.kind <> 'w' OR p_kind = 's') AND (p_kind <> 's' OR t.kind IN ('x', 'w'));
    RETURN QUERY SELECT false, 0::bigint,
      CASE WHEN v_forever THEN -1::bigint
           ELSE greatest(0, ceil(extract(epoch FROM v_until - v_now) * 1000))::bigint END, ''::text;
    RETURN;
  END IF;

  v_token := greatest(v_last + 1, floor(extract(epoch FROM v_now) * 1000000)::bigint);
  UPDATE {{t}} t SET token = v_token WHERE t.name = p_name AND t.hold = '';
  DELETE FROM {{t}} t WHERE t.name = p_name AND t.hold = p_hold AND t.kind = 'w';
  INSERT INTO {{t}} (name, hold, kind, permits, take, owner, token, expires, value)
    VALUES (p_name, p_hold, p_kind, p_permits, p_take, p_owner, v_token,
            CASE WHEN p_lease_ms = 0 THEN NULL ELSE v_now + p_lease_ms * interval '1 millisecond' END, p_value);
  RETURN QUERY SELECT true, v_token, NULL::bigint, ''::text;
END
$$;

-- Release: true when the hold was still the owner's (not expired); its row goes either way,
-- and the waiters listening on the table's channel are told the name.
CREATE OR REPLACE FUNCTION {{t_release}}(p_name text, p_hold text, p_owner text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_expires timestamptz;
BEGIN
  DELETE FROM {{t}} t WHERE t.name = p_name AND t.hold = p_hold AND t.owner = p_owner AND t.kind <> 'w'
    RETURNING t.expires INTO v_expires;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM pg_notify({{channel}}, p_name);
  RETURN v_expires IS NULL OR v_expires > clock_timestamp();
END
$$;

-- Renewals, several in one call: each hold k that is still its owner's gets a new expiry, its
-- lease from now (0: none); the answer lists the k renewed (1-based). An extend is one of them.
CREATE OR REPLACE FUNCTION {{t_renew}}(p_names text[], p_holds text[], p_owners text[], p_lease_ms bigint[])
RETURNS SETOF bigint
LANGUAGE sql AS $$
  UPDATE {{t}} t
     SET expires = CASE WHEN r.lease_ms = 0 THEN NULL
                        ELSE clock_timestamp() + r.lease_ms * interval '1 millisecond' END
    FROM unnest(p_names, p_holds, p_owners, p_lease_ms) WITH ORDINALITY AS r(name, hold, owner, lease_ms, k)
   WHERE t.name = r.name AND t.hold = r.hold AND t.owner = r.owner AND t.kind <> 'w'
     AND (t.expires IS NULL OR t.expires > clock_timestamp())
  RETURNING r.k
$$;

-- A held lock's new value (NULL: none): true when the hold was still the owner's.
CREATE OR REPLACE FUNCTION {{t_set_value}}(p_name text, p_hold text, p_owner text, p_value bytea)
RETURNS boolean
LANGUAGE sql AS $$
  WITH changed AS (
    UPDATE {{t}} t SET value = p_value
     WHERE t.name = p_name AND t.hold = p_hold AND t.owner = p_owner AND t.kind <> 'w'
       AND (t.expires IS NULL OR t.expires > clock_timestamp())
    RETURNING 1)
  SELECT EXISTS (SELECT 1 FROM changed)
$$;

-- Who holds name now, oldest token first: the holds not expired, each owner's label (what
-- follows the first '|' of its owner value: the secret token before it never leaves the
-- server here), what is left of each lease in ms (NULL: no expiry).
CREATE OR REPLACE FUNCTION {{t_inspect}}(p_name text)
RETURNS TABLE (kind "char", permits integer, take integer, label text, fencing_token bigint,
               remaining_ms bigint, value bytea)
LANGUAGE sql AS $$
  SELECT t.kind, t.permits, t.take,
         CASE WHEN position('|' IN t.owner) = 0 THEN '' ELSE substr(t.owner, position('|' IN t.owner) + 1) END,
         t.token,
         CASE WHEN t.expires IS NULL THEN NULL
              ELSE ceil(extract(epoch FROM t.expires - clock_timestamp()) * 1000)::bigint END,
         t.value
    FROM {{t}} t
   WHERE t.name = p_name AND t.hold <> '' AND t.kind <> 'w' AND (t.expires IS NULL OR t.expires > clock_timestamp())
   ORDER BY t.token
$$;
