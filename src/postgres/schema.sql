-- dlock's lock table on PostgreSQL and the functions that are its protocol, called by the
-- backend over libpq (lock_protocol.h). dlock_backend_prepare runs this file with
-- {{t}} replaced by the table's quoted name (table=, default dlock_locks), {{t_NAME}} by the
-- quoted name of the table's function NAME (table + "_" + NAME), {{channel}} by the table's
-- name as a string literal, and {{unlogged}} by "UNLOGGED " with unlogged=1. Every name and
-- value reaches these functions as a parameter.
--
-- One row per lock name (hold '', kind 'n') carries the name's fencing counter and is never
-- deleted, and every call that changes a name locks it first; one row per hold (hold = the
-- hold's public id) carries its kind, owner value (the secret token [|label] that release,
-- renew and extend must match), token, expiry and value; waiters keep rows too (the line).
-- Expiry is on the server's clock (clock_timestamp()); NULL never expires.
--
-- Fencing: an acquire locks its name's row (FOR UPDATE) before it reads the clock, and issues
-- max(counter + 1, clock in µs). The counter makes tokens rise while the table keeps its rows;
-- the clock floor makes them rise after the rows are lost (an unlogged table emptied by a
-- crash; a failover to a replica that missed the last commits), as long as the new server's
-- clock does not trail the old one's by more than the time the loss took.

CREATE {{unlogged}}TABLE IF NOT EXISTS {{t}} (
  name     text        NOT NULL,
  hold     text        NOT NULL,
  -- 'n' the name's row; holds: 'x' exclusive, 's' shared, 'p' a semaphore's; 'w' a waiting
  -- writer's announcement; waiters in line: 'X', 'S', 'P' (the hold each waits for); a break's
  -- marker 'b' (hold '~broken': the name closed until it expires) and records 'r' (hold
  -- '~broken TOKEN': a broken hold's token, the operator's reason as its value); job rules'
  -- markers 'm' (hold '~min_hold') and 'd' (hold '~lock_delay'), owner-less, until expires.
  kind     "char"      NOT NULL,
  permits  integer     NOT NULL DEFAULT 0,  -- a semaphore's size
  take     integer     NOT NULL DEFAULT 1,  -- the permits a hold takes
  owner    text        NOT NULL DEFAULT '',
  -- a hold's token; the name's row: the last one issued; a waiter: its place in line
  token    bigint      NOT NULL DEFAULT 0,
  expires  timestamptz,                     -- a waiter's: when its place lapses
  value    bytea,
  lease_ms bigint      NOT NULL DEFAULT 0,  -- a waiter's lease, counted from since
  since    timestamptz,                     -- a waiter's last try
  -- Job rules: a hold's min hold ends at min_until (a waiter's: min_hold_ms after it is
  -- served), and an unclean end (its lease ran out) closes the name delay_ms more.
  min_hold_ms bigint   NOT NULL DEFAULT 0,
  min_until   timestamptz,
  delay_ms    bigint   NOT NULL DEFAULT 0,
  PRIMARY KEY (name, hold)
);
-- A table prepared before the job rules came gets their columns.
ALTER TABLE {{t}} ADD COLUMN IF NOT EXISTS min_hold_ms bigint NOT NULL DEFAULT 0,
                  ADD COLUMN IF NOT EXISTS min_until timestamptz,
                  ADD COLUMN IF NOT EXISTS delay_ms bigint NOT NULL DEFAULT 0;
-- Deletes name's rows expired by p_now, but those another transaction has locked (a release or
-- a renewal of that row, which takes the name's row lock after it: waiting for it here, with
-- the name's row locked, could deadlock). Those go at the next look; every reader treats an
-- expired row as gone meanwhile. A hold that ended so (an unclean end) leaves its job rules'
-- markers: its min hold's end, and its lease's end + its lock-delay, those still to come.
CREATE OR REPLACE FUNCTION {{t_sweep}}(p_name text, p_now timestamptz)
RETURNS void
LANGUAGE sql AS $$
  WITH gone AS (
    DELETE FROM {{t}} t WHERE t.ctid IN (
      SELECT e.ctid FROM {{t}} e WHERE e.name = p_name AND e.hold <> '' AND e.expires <= p_now
         FOR UPDATE SKIP LOCKED)
    RETURNING t.kind, t.expires, t.min_until, t.delay_ms)
  INSERT INTO {{t}} AS t (name, hold, kind, expires)
  SELECT p_name, m.hold, m.kind, max(m.ends) FROM (
      SELECT '~min_hold' AS hold, 'm'::"char" AS kind, g.min_until AS ends FROM gone g
       WHERE g.kind IN ('x', 's', 'p') AND g.min_until > p_now
      UNION ALL
      SELECT '~lock_delay', 'd'::"char", g.expires + g.delay_ms * interval '1 millisecond' FROM gone g
       WHERE g.kind IN ('x', 's', 'p') AND g.delay_ms > 0 AND g.expires + g.delay_ms * interval '1 millisecond' > p_now
    ) m GROUP BY m.hold, m.kind
  ON CONFLICT (name, hold) DO UPDATE SET expires = greatest(t.expires, excluded.expires)
$$;

-- The fair line: waiters that will wait (p_in_line) keep a row in it, renewed by each try, and
-- a release (or an expiry that a try finds, or a waiter leaving) serves its head, in order:
-- an exclusive waiter once nothing is held; shared waiters together while no exclusive hold
-- stands, up to the first exclusive waiter; semaphore waiters while their takes fit, never
-- overtaken by one behind them. A waiter served gets its hold and token there, its lease
-- counted from its last try, and is told by a notification 'g HOLD TOKEN NAME'. Rows expired
-- by p_now go first. p_tell: when nobody waits in line any more, the waiters that wait outside
-- it are told 'r NAME'. The caller holds the name's row lock. Returns how many were served.
CREATE OR REPLACE FUNCTION {{t_serve}}(p_name text, p_now timestamptz, p_tell boolean)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_last bigint;
  v_token bigint;
  v_exclusive boolean;
  v_sort integer;
  v_taken bigint;
  v_held boolean;
  v_served integer := 0;
  w record;
BEGIN
  IF EXISTS (SELECT 1 FROM {{t}} t WHERE t.name = p_name AND t.hold <> '' AND t.expires <= p_now) THEN
    PERFORM {{t_sweep}}(p_name, p_now);
  END IF;
  IF EXISTS (SELECT 1 FROM {{t}} t WHERE t.name = p_name AND t.kind = 'b' AND t.expires > p_now) THEN
    RETURN 0;  -- closed by a break: nobody is served before its marker ends
  END IF;
  SELECT t.token INTO v_last FROM {{t}} t WHERE t.name = p_name AND t.hold = '';
  SELECT coalesce(bool_or(t.kind = 'x'), false), max(CASE WHEN t.kind = 'p' THEN t.permits ELSE 0 END),
         coalesce(sum(t.take), 0), count(*) > 0
    INTO v_exclusive, v_sort, v_taken, v_held
    FROM {{t}} t WHERE t.name = p_name AND t.kind IN ('x', 's', 'p');
  IF NOT v_held AND EXISTS (SELECT 1 FROM {{t}} t WHERE t.name = p_name AND t.kind IN ('m', 'd') AND t.expires > p_now) THEN
    RETURN 0;  -- a job rule's marker closes the name while no hold stands
  END IF;
  FOR w IN SELECT t.hold, t.kind, t.permits, t.take, t.lease_ms, t.since, t.min_hold_ms FROM {{t}} t
            WHERE t.name = p_name AND t.kind IN ('X', 'S', 'P') ORDER BY t.token LOOP
    IF w.kind = 'X' THEN
      EXIT WHEN v_held;
    ELSIF w.kind = 'S' THEN
      EXIT WHEN v_exclusive OR coalesce(v_sort, 0) <> 0;
    ELSE
      EXIT WHEN (v_sort IS NOT NULL AND v_sort <> w.permits) OR v_taken + w.take > w.permits;
    END IF;
    v_token := greatest(v_last + 1, floor(extract(epoch FROM p_now) * 1000000)::bigint);
    v_last := v_token;
    UPDATE {{t}} t
       SET kind = lower(w.kind::text)::"char", token = v_token,
           expires = CASE WHEN w.lease_ms = 0 THEN NULL ELSE w.since + w.lease_ms * interval '1 millisecond' END,
           min_until = CASE WHEN w.min_hold_ms > 0 THEN p_now + w.min_hold_ms * interval '1 millisecond' END
     WHERE t.name = p_name AND t.hold = w.hold;
    PERFORM pg_notify({{channel}}, 'g ' || w.hold || ' ' || v_token || ' ' || p_name);
    v_served := v_served + 1;
    v_held := true;
    IF w.kind = 'X' THEN
      EXIT;
    ELSIF w.kind = 'S' THEN
      v_sort := 0;
    ELSE
      v_sort := w.permits;
      v_taken := v_taken + w.take;
    END IF;
  END LOOP;
  IF v_served > 0 THEN
    UPDATE {{t}} t SET token = v_last WHERE t.name = p_name AND t.hold = '';
  END IF;
  IF p_tell AND NOT EXISTS (SELECT 1 FROM {{t}} t WHERE t.name = p_name AND t.kind IN ('X', 'S', 'P')) THEN
    PERFORM pg_notify({{channel}}, 'r ' || p_name);
  END IF;
  RETURN v_served;
END
$$;

-- One try. acquired: fencing_token is the hold's, and holder_ttl_ms what is left of its lease
-- when the hold was made before this try (a waiter served from the line, or an earlier try
-- whose answer was lost; NULL: the whole lease, or none). Refused: holder_ttl_ms is how long
-- until the first blocking hold may end (-1: one never expires; NULL: unknown, as when only
-- waiters in line stand in the way: no hold's end would let this try in), and why is '' or
-- 'sort N' (the name is held as a semaphore of N permits, or as a lock for N = 0, and this
-- acquire asked for the other: an error, not a refusal), or 'closed broken', 'closed
-- min_hold', 'closed lock_delay' (a marker closes the name; holder_ttl_ms: until it ends).
--
-- Job rules (p_min_hold_ms, p_lock_delay_ms; 0: none): the hold won keeps them (min_until,
-- delay_ms). While no hold stands, the name stays closed until every min hold's end, and
-- until every uncleanly ended hold's lease end + its delay (the markers that sweeping or a
-- release left, and the expired holds not swept yet alike).
--
-- p_in_line: the acquire will wait, and keeps its place in the fair line (the serve function
-- above) for p_queue_ms. A try not in line is refused while anyone waits in line.
-- Writer preference without a line: an exclusive acquire refused with p_queue_ms > 0 leaves a
-- row of kind 'w' under its hold id for that long, and while one stands no new shared hold is
-- granted; its acquire replaces it, and one that gave up leaves it to lapse.
DROP FUNCTION IF EXISTS {{t_acquire}}(text, text, "char", integer, integer, text, bigint, bytea, bigint, boolean);
CREATE OR REPLACE FUNCTION {{t_acquire}}(p_name text, p_hold text, p_kind "char", p_permits integer,
                                         p_take integer, p_owner text, p_lease_ms bigint, p_value bytea,
                                         p_queue_ms bigint DEFAULT 0, p_in_line boolean DEFAULT false,
                                         p_min_hold_ms bigint DEFAULT 0, p_lock_delay_ms bigint DEFAULT 0)
RETURNS TABLE (acquired boolean, fencing_token bigint, holder_ttl_ms bigint, why text)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_last bigint;
  v_token bigint;
  v_expires timestamptz;
  v_expired bigint;
  v_sort integer;
  v_taken bigint;
  v_mine bigint;
  v_marks boolean;    -- this hold's own rows that are not holds (a writer's announcement, a place in line)
  v_line boolean;     -- others wait in line
  v_writers boolean;  -- an exclusive hold, or a writer's announcement
  v_blocked boolean;
  v_until timestamptz;
  v_forever boolean;
  v_closed timestamptz;  -- a break's marker stands until then
  v_min_end timestamptz;    -- a min hold's end
  v_delay_end timestamptz;  -- an unclean end's lock-delay's end
  v_delay bigint := CASE WHEN p_lease_ms = 0 THEN 0 ELSE p_lock_delay_ms END;  -- no lease: no unclean end
BEGIN
  SELECT t.token INTO v_last FROM {{t}} t WHERE t.name = p_name AND t.hold = '' FOR UPDATE;
  IF NOT FOUND THEN
    INSERT INTO {{t}} (name, hold, kind) VALUES (p_name, '', 'n') ON CONFLICT (name, hold) DO NOTHING;
    SELECT t.token INTO v_last FROM {{t}} t WHERE t.name = p_name AND t.hold = '' FOR UPDATE;
  END IF;
  v_now := clock_timestamp();

  -- One look at the name's rows; expired ones count as gone.
  SELECT count(*) FILTER (WHERE t.expires <= v_now),
         max(CASE WHEN t.kind = 'p' THEN t.permits ELSE 0 END)
           FILTER (WHERE t.kind IN ('x', 's', 'p') AND t.hold <> p_hold AND (t.expires IS NULL OR t.expires > v_now)),
         coalesce(sum(t.take) FILTER (WHERE t.kind IN ('x', 's', 'p') AND t.hold <> p_hold
                                        AND (t.expires IS NULL OR t.expires > v_now)), 0),
         max(t.token) FILTER (WHERE t.kind IN ('x', 's', 'p') AND t.hold = p_hold AND t.owner = p_owner
                                AND (t.expires IS NULL OR t.expires > v_now)),
         coalesce(bool_or(t.hold = p_hold AND t.kind NOT IN ('x', 's', 'p')), false),
         coalesce(bool_or(t.kind IN ('X', 'S', 'P') AND t.hold <> p_hold AND t.expires > v_now), false),
         coalesce(bool_or(t.kind IN ('x', 'w') AND t.hold <> p_hold AND (t.expires IS NULL OR t.expires > v_now)), false),
         max(t.expires) FILTER (WHERE t.kind = 'b' AND t.expires > v_now),
         max(CASE WHEN t.kind = 'm' THEN t.expires ELSE t.min_until END)
           FILTER (WHERE t.kind = 'm' OR (t.kind IN ('x', 's', 'p') AND t.expires <= v_now)),
         max(CASE WHEN t.kind = 'd' THEN t.expires ELSE t.expires + t.delay_ms * interval '1 millisecond' END)
           FILTER (WHERE t.kind = 'd' OR (t.kind IN ('x', 's', 'p') AND t.expires <= v_now AND t.delay_ms > 0))
    INTO v_expired, v_sort, v_taken, v_mine, v_marks, v_line, v_writers, v_closed, v_min_end, v_delay_end
    FROM {{t}} t WHERE t.name = p_name AND t.hold <> '';
  IF v_expired > 0 THEN
    PERFORM {{t_sweep}}(p_name, v_now);
  END IF;
  -- Job rules close the name only while no hold stands.
  IF v_min_end <= v_now OR v_sort IS NOT NULL THEN v_min_end := NULL; END IF;
  IF v_delay_end <= v_now OR v_sort IS NOT NULL THEN v_delay_end := NULL; END IF;

  -- What the name is while held: a semaphore of N (its permits' N), or a lock (0).
  IF v_sort IS NOT NULL AND v_sort <> (CASE WHEN p_kind = 'p' THEN p_permits ELSE 0 END) THEN
    RETURN QUERY SELECT false, 0::bigint, NULL::bigint, 'sort ' || v_sort;
    RETURN;
  END IF;

  IF p_in_line AND p_queue_ms > 0 AND v_mine IS NULL THEN
    INSERT INTO {{t}} (name, hold, kind, permits, take, owner, token, expires, value, lease_ms, since, min_hold_ms,
                       delay_ms)
      VALUES (p_name, p_hold, upper(p_kind::text)::"char", p_permits, p_take, p_owner,
              (SELECT coalesce(max(t.token), 0) + 1 FROM {{t}} t WHERE t.name = p_name AND t.kind IN ('X', 'S', 'P')),
              v_now + p_queue_ms * interval '1 millisecond', p_value, p_lease_ms, v_now, p_min_hold_ms, v_delay)
      ON CONFLICT (name, hold) DO UPDATE
        SET expires = excluded.expires, since = excluded.since, lease_ms = excluded.lease_ms, value = excluded.value,
            min_hold_ms = excluded.min_hold_ms, delay_ms = excluded.delay_ms
        WHERE {{t}}.kind IN ('X', 'S', 'P') AND {{t}}.owner = p_owner;
    PERFORM {{t_serve}}(p_name, v_now, false);
    SELECT t.token INTO v_mine FROM {{t}} t
     WHERE t.name = p_name AND t.hold = p_hold AND t.owner = p_owner AND t.kind IN ('x', 's', 'p');
  END IF;

  IF v_mine IS NOT NULL THEN  -- served from the line, or an earlier try whose answer was lost
    SELECT t.expires INTO v_expires FROM {{t}} t WHERE t.name = p_name AND t.hold = p_hold;
    RETURN QUERY SELECT true, v_mine,
      CASE WHEN v_expires IS NULL THEN NULL
           ELSE greatest(0, floor(extract(epoch FROM v_expires - v_now) * 1000))::bigint END, ''::text;
    RETURN;
  END IF;

  IF (p_in_line AND p_queue_ms > 0) OR v_line OR v_closed IS NOT NULL OR v_min_end IS NOT NULL
     OR v_delay_end IS NOT NULL THEN
    v_blocked := true;
  ELSIF p_kind = 'x' THEN
    v_blocked := v_sort IS NOT NULL;
  ELSIF p_kind = 's' THEN
    v_blocked := v_writers;
  ELSE
    v_blocked := v_taken + p_take > p_permits;
  END IF;
  IF v_blocked THEN
    IF p_kind = 'x' AND p_queue_ms > 0 AND NOT p_in_line THEN
      INSERT INTO {{t}} (name, hold, kind, owner, expires)
        VALUES (p_name, p_hold, 'w', p_owner, v_now + p_queue_ms * interval '1 millisecond')
        ON CONFLICT (name, hold) DO UPDATE SET expires = excluded.expires WHERE {{t}}.kind = 'w';
    END IF;
    IF v_closed IS NULL AND (v_min_end IS NOT NULL OR v_delay_end IS NOT NULL) THEN
      RETURN QUERY SELECT false, 0::bigint,
        greatest(0, ceil(extract(epoch FROM greatest(v_min_end, v_delay_end) - v_now) * 1000))::bigint,
        CASE WHEN v_delay_end >= coalesce(v_min_end, v_delay_end) THEN 'closed lock_delay' ELSE 'closed min_hold' END;
      RETURN;
    END IF;
    SELECT min(t.expires), bool_or(t.expires IS NULL) INTO v_until, v_forever
      FROM {{t}} t WHERE t.name = p_name AND t.hold <> p_hold AND (t.expires IS NULL OR t.expires > v_now)
                     AND (t.kind IN ('x', 'p', 'b') OR (t.kind = 's' AND p_kind <> 's') OR (t.kind = 'w' AND p_kind = 's'));
    RETURN QUERY SELECT false, 0::bigint,
      CASE WHEN v_forever THEN -1::bigint
           WHEN v_until IS NULL THEN NULL::bigint  -- only the line stands in the way: unknown
           ELSE greatest(0, ceil(extract(epoch FROM v_until - v_now) * 1000))::bigint END,
      CASE WHEN v_closed IS NOT NULL THEN 'closed broken' ELSE '' END;
    RETURN;
  END IF;

  v_token := greatest(v_last + 1, floor(extract(epoch FROM v_now) * 1000000)::bigint);
  UPDATE {{t}} t SET token = v_token WHERE t.name = p_name AND t.hold = '';
  IF v_marks THEN
    DELETE FROM {{t}} t WHERE t.name = p_name AND t.hold = p_hold;
  END IF;
  INSERT INTO {{t}} (name, hold, kind, permits, take, owner, token, expires, value, min_until, delay_ms)
    VALUES (p_name, p_hold, p_kind, p_permits, p_take, p_owner, v_token,
            CASE WHEN p_lease_ms = 0 THEN NULL ELSE v_now + p_lease_ms * interval '1 millisecond' END, p_value,
            CASE WHEN p_min_hold_ms > 0 THEN v_now + p_min_hold_ms * interval '1 millisecond' END, v_delay)
    ON CONFLICT (name, hold) DO UPDATE
      SET kind = excluded.kind, permits = excluded.permits, take = excluded.take, owner = excluded.owner,
          token = excluded.token, expires = excluded.expires, value = excluded.value, lease_ms = 0, since = NULL,
          min_until = excluded.min_until, delay_ms = excluded.delay_ms;
  RETURN QUERY SELECT true, v_token, NULL::bigint, ''::text;
END
$$;

-- Release: true when the hold was still the owner's (not expired); its row goes either way.
-- Its min hold, still to come, leaves a marker; a release after the lease ran out (an unclean
-- end) leaves its lock-delay's too. The line's head is served; when nobody waits in line any
-- more, the waiters that wait outside it are told 'r NAME'.
CREATE OR REPLACE FUNCTION {{t_release}}(p_name text, p_hold text, p_owner text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_expires timestamptz;
  v_min_until timestamptz;
  v_delay bigint;
  v_now timestamptz;
BEGIN
  PERFORM 1 FROM {{t}} t WHERE t.name = p_name AND t.hold = '' FOR UPDATE;
  DELETE FROM {{t}} t WHERE t.name = p_name AND t.hold = p_hold AND t.owner = p_owner AND t.kind IN ('x', 's', 'p')
    RETURNING t.expires, t.min_until, t.delay_ms INTO v_expires, v_min_until, v_delay;
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  v_now := clock_timestamp();
  IF v_min_until > v_now THEN
    INSERT INTO {{t}} AS t (name, hold, kind, expires) VALUES (p_name, '~min_hold', 'm', v_min_until)
      ON CONFLICT (name, hold) DO UPDATE SET expires = greatest(t.expires, excluded.expires);
  END IF;
  IF v_expires <= v_now AND v_delay > 0 AND v_expires + v_delay * interval '1 millisecond' > v_now THEN
    INSERT INTO {{t}} AS t (name, hold, kind, expires)
      VALUES (p_name, '~lock_delay', 'd', v_expires + v_delay * interval '1 millisecond')
      ON CONFLICT (name, hold) DO UPDATE SET expires = greatest(t.expires, excluded.expires);
  END IF;
  IF EXISTS (SELECT 1 FROM {{t}} t WHERE t.name = p_name AND t.kind IN ('X', 'S', 'P')) THEN
    IF {{t_serve}}(p_name, v_now, true) = 0 THEN
      PERFORM pg_notify({{channel}}, 'v ' || p_name);  -- nobody served: observers still hear of it
    END IF;
  ELSE
    PERFORM pg_notify({{channel}}, 'r ' || p_name);
  END IF;
  RETURN v_expires IS NULL OR v_expires > v_now;
END
$$;

-- Several releases in one statement (a closing client's): each as the release function does,
-- in name order, so that two clients releasing the same names never wait for each other in a
-- cycle. Returns how many holds were still their owners'.
CREATE OR REPLACE FUNCTION {{t_release_all}}(p_names text[], p_holds text[], p_owners text[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_released integer := 0;
  r record;
BEGIN
  FOR r IN SELECT u.name, u.hold, u.owner FROM unnest(p_names, p_holds, p_owners) AS u(name, hold, owner)
            ORDER BY u.name, u.hold LOOP
    IF {{t_release}}(r.name, r.hold, r.owner) THEN
      v_released := v_released + 1;
    END IF;
  END LOOP;
  RETURN v_released;
END
$$;

-- A waiter that stops waiting leaves the line; a hold the line gave it meanwhile, which it will
-- not take, is given back and handed on.
CREATE OR REPLACE FUNCTION {{t_leave}}(p_name text, p_hold text, p_owner text)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM 1 FROM {{t}} t WHERE t.name = p_name AND t.hold = '' FOR UPDATE;
  DELETE FROM {{t}} t WHERE t.name = p_name AND t.hold = p_hold AND t.owner = p_owner
     AND t.kind IN ('x', 's', 'p', 'X', 'S', 'P');
  IF FOUND THEN
    PERFORM {{t_serve}}(p_name, clock_timestamp(), true);
  END IF;
END
$$;

-- Break (dlock_break): an operator's takeover. Deletes every hold of p_name and every job
-- rule's marker, never its counter,
-- so the next token is still above every earlier one. Records each broken hold's token with
-- the reason (kind 'r', for p_keep_ms; the newest p_max_records kept), so that a broken
-- holder's next renewal, extend or release can say why it was refused (the inspect function).
-- Unless p_now, closes the name (kind 'b', no owner) until the broken holds' leases would have
-- ended, or as long as an earlier break's marker has left: a broken holder works on until it
-- hears, and nobody may overlap it. Waiters are woken; p_now serves the line. One row per
-- broken hold (one with b_label NULL when none was): its kind and permits, how long the name
-- stays closed (ms; 0: free now), and the hold's label, lease left (NULL: none), token and id.
CREATE OR REPLACE FUNCTION {{t_break}}(p_name text, p_reason text, p_now boolean, p_keep_ms bigint,
                                       p_max_records integer)
RETURNS TABLE (b_kind "char", b_permits integer, b_closed_ms bigint, b_label text, b_remaining_ms bigint,
               b_token bigint, b_hold text)
LANGUAGE plpgsql AS $$
DECLARE
  v_now timestamptz;
  v_closing bigint;
  v_left bigint;
  v_kinds "char"[] := '{}';
  v_permits integer[] := '{}';
  v_labels text[] := '{}';
  v_lefts bigint[] := '{}';
  v_tokens bigint[] := '{}';
  v_holds text[] := '{}';
  w record;
BEGIN
  PERFORM 1 FROM {{t}} t WHERE t.name = p_name AND t.hold = '' FOR UPDATE;
  v_now := clock_timestamp();
  -- An earlier break's marker keeps what is left of it: its broken holders may not know yet.
  SELECT coalesce(max(ceil(extract(epoch FROM t.expires - v_now) * 1000)), 0)::bigint INTO v_closing
    FROM {{t}} t WHERE t.name = p_name AND t.kind = 'b' AND t.expires > v_now;
  FOR w IN DELETE FROM {{t}} t WHERE t.name = p_name AND t.kind IN ('x', 's', 'p')
           RETURNING t.kind, t.permits, t.owner, t.token, t.expires, t.hold LOOP
    CONTINUE WHEN w.expires <= v_now;  -- already over: nobody's to break
    v_left := CASE WHEN w.expires IS NULL THEN NULL
                   ELSE greatest(0, ceil(extract(epoch FROM w.expires - v_now) * 1000))::bigint END;
    v_closing := greatest(v_closing, coalesce(v_left, 0));
    v_kinds := v_kinds || w.kind;
    v_permits := v_permits || w.permits;
    v_labels := v_labels || CASE WHEN position('|' IN w.owner) = 0 THEN ''
                                 ELSE substr(w.owner, position('|' IN w.owner) + 1) END;
    v_lefts := v_lefts || v_left;
    v_tokens := v_tokens || w.token;
    v_holds := v_holds || w.hold;
    INSERT INTO {{t}} (name, hold, kind, token, expires, value)
      VALUES (p_name, '~broken ' || w.token, 'r', w.token, v_now + p_keep_ms * interval '1 millisecond',
              convert_to(p_reason, 'UTF8'))
      ON CONFLICT (name, hold) DO UPDATE SET expires = excluded.expires, value = excluded.value;
  END LOOP;
  DELETE FROM {{t}} t WHERE t.name = p_name AND t.kind IN ('m', 'd');  -- job rules' markers
  -- Only the newest records stay (the greatest tokens).
  DELETE FROM {{t}} t WHERE t.name = p_name AND t.kind = 'r' AND t.hold NOT IN (
    SELECT r.hold FROM {{t}} r WHERE r.name = p_name AND r.kind = 'r' ORDER BY r.token DESC LIMIT p_max_records);
  IF p_now THEN
    v_closing := 0;
  END IF;
  IF v_closing > 0 THEN
    INSERT INTO {{t}} (name, hold, kind, expires)
      VALUES (p_name, '~broken', 'b', v_now + v_closing * interval '1 millisecond')
      ON CONFLICT (name, hold) DO UPDATE SET expires = excluded.expires;
    PERFORM pg_notify({{channel}}, 'r ' || p_name);  -- waiters learn how long it stays closed
  ELSE
    DELETE FROM {{t}} t WHERE t.name = p_name AND t.kind = 'b';
    PERFORM {{t_serve}}(p_name, v_now, true);  -- serves the line, or tells the waiters outside it
  END IF;
  IF cardinality(v_holds) = 0 THEN
    RETURN QUERY SELECT NULL::"char", 0, v_closing, NULL::text, NULL::bigint, NULL::bigint, NULL::text;
  ELSE
    RETURN QUERY SELECT u.k, u.p, v_closing, u.l, u.r, u.tk, u.h
      FROM unnest(v_kinds, v_permits, v_labels, v_lefts, v_tokens, v_holds) AS u(k, p, l, r, tk, h);
  END IF;
END
$$;

-- A release request (dlock_request_release): tells the holders of p_name that someone asks
-- them to let go, by a notification 'q ID N REASON NAME' (N: REASON's length in bytes); takes
-- nothing. Returns how many holds were asked (0: nobody holds the name, and nothing is sent).
CREATE OR REPLACE FUNCTION {{t_request}}(p_name text, p_id text, p_reason text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  v_held integer;
BEGIN
  SELECT count(*) INTO v_held FROM {{t}} t
   WHERE t.name = p_name AND t.kind IN ('x', 's', 'p') AND (t.expires IS NULL OR t.expires > clock_timestamp());
  IF v_held > 0 THEN
    PERFORM pg_notify({{channel}}, 'q ' || p_id || ' ' || octet_length(p_reason) || ' ' || p_reason || ' ' || p_name);
  END IF;
  RETURN v_held;
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
   WHERE t.name = r.name AND t.hold = r.hold AND t.owner = r.owner AND t.kind IN ('x', 's', 'p')
     AND (t.expires IS NULL OR t.expires > clock_timestamp())
  RETURNING r.k
$$;

-- A held lock's new value (NULL: none): true when the hold was still the owner's. Observers
-- are told 'v NAME' (the name's holders or values changed).
CREATE OR REPLACE FUNCTION {{t_set_value}}(p_name text, p_hold text, p_owner text, p_value bytea)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  UPDATE {{t}} t SET value = p_value
   WHERE t.name = p_name AND t.hold = p_hold AND t.owner = p_owner AND t.kind IN ('x', 's', 'p')
     AND (t.expires IS NULL OR t.expires > clock_timestamp());
  IF NOT FOUND THEN
    RETURN false;
  END IF;
  PERFORM pg_notify({{channel}}, 'v ' || p_name);
  RETURN true;
END
$$;

-- Who holds name now, oldest token first: the holds not expired, each owner's label (what
-- follows the first '|' of its owner value: the secret token before it never leaves the
-- server here), what is left of each lease in ms (NULL: no expiry); and markers and records
-- (kinds 'b', 'r', 'm', 'd'; job rules also of expired holds), for the client to read apart.
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
   WHERE t.name = p_name AND t.hold <> '' AND t.kind IN ('x', 's', 'p', 'b', 'r', 'm', 'd')
     AND (t.expires IS NULL OR t.expires > clock_timestamp())
  UNION ALL  -- the rules of holds that ended uncleanly, not swept yet
  SELECT r.kind, 0, 1, '', 0::bigint, ceil(extract(epoch FROM r.ends - clock_timestamp()) * 1000)::bigint, NULL::bytea
    FROM (SELECT 'm'::"char" AS kind, e.min_until AS ends FROM {{t}} e
           WHERE e.name = p_name AND e.kind IN ('x', 's', 'p') AND e.expires <= clock_timestamp()
          UNION ALL
          SELECT 'd'::"char", e.expires + e.delay_ms * interval '1 millisecond' FROM {{t}} e
           WHERE e.name = p_name AND e.kind IN ('x', 's', 'p') AND e.expires <= clock_timestamp() AND e.delay_ms > 0) r
   WHERE r.ends > clock_timestamp()
   ORDER BY 5
$$;
