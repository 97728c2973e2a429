-- sequence
(none)

-- validated
SELECT *, CASE WHEN _kv IS NOT NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND ((size(_kv) > 0 AND get(_kv, 0) IS NULL)) THEN 'KEY_MISSING' END AS _reject, CASE WHEN _kv IS NOT NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND ((size(_kv) > 0 AND get(_kv, 0) IS NULL)) THEN concat('row event lacks a value (of the column type) for key column(s) [', array_join(element_at(map('orders', array('id'), 'customers', array('id')), _target), ', '), '] of table ', element_at(map('customers', 'customers', 'orders', 'orders'), _target)) END AS _reason FROM (SELECT *, CASE WHEN _target IN ('orders', 'customers') THEN array(CAST(try_cast(coalesce(key['id'], get(from_json(metadata['key_values'], 'array<string>'), 0), (CASE WHEN operation = 'DELETE' THEN before ELSE after END)['id']) AS bigint) AS string)) END AS _kv FROM events)

-- rejected
SELECT * FROM validated WHERE _reject IS NOT NULL

-- rows
SELECT _target, v.k AS _kv,
                   CASE WHEN _reject IS NULL THEN to_json(v.k) ELSE concat('!', _reject) END
                     AS _kj,
                   sequence AS _seq, timestamp AS _ts, id AS _id, origin, offset, item,
                   v.op AS _op, partial AND v.op <> 'DELETE' AS _partial, v.a AS _after,
                   v.fp AS _fp, _reject IS NOT NULL AS _bad
            FROM (SELECT *, CASE WHEN _target IN ('orders', 'customers') THEN array(CAST(try_cast(before['id'] AS bigint) AS string)) END AS _okv FROM validated
                  WHERE array_contains(array('orders', 'customers'), _target) AND (_reject IS NOT NULL
                    OR (operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT')
                        AND sequence > coalesce(element_at(CAST(map() AS map<string,string>), _target), ''))))
            LATERAL VIEW explode(
              CASE WHEN _reject IS NULL THEN CASE WHEN operation IN ('UPDATE', 'UPSERT') AND before IS NOT NULL AND NOT ((size(_okv) > 0 AND get(_okv, 0) IS NULL)) AND _okv <> _kv THEN array(named_struct('k', _kv, 'op', operation, 'a', CASE WHEN operation <> 'DELETE' THEN after WHEN array_contains(CAST(array() AS array<string>), _target) THEN before END, 'fp', _fp), named_struct('k', _okv, 'op', 'DELETE', 'a', CAST(NULL AS map<string,string>), 'fp', _fp + 1)) ELSE array(named_struct('k', _kv, 'op', operation, 'a', CASE WHEN operation <> 'DELETE' THEN after WHEN array_contains(CAST(array() AS array<string>), _target) THEN before END, 'fp', _fp)) END
                   ELSE array(named_struct('k', _kv, 'op', operation, 'a', CAST(NULL AS map<string,string>), 'fp', _fp))
              END) e AS v

-- winners
SELECT _target, _kj, _kv, _seq, _ts, _id, _op, _partial, _after, _fp, _bad,
               CAST(_n_in AS bigint) AS _n_in, CAST(_nfp AS bigint) AS _nfp
        FROM (
          SELECT *, row_number() OVER (PARTITION BY _target, _kj, _seq ORDER BY origin DESC, offset DESC, item DESC)
                      AS _rs,
                 count(*) OVER (PARTITION BY _target, _kj, _seq) AS _n_in,
                 size(collect_set(_fp) OVER (PARTITION BY _target, _kj, _seq)) AS _nfp
          FROM (
            SELECT _target, _kj, _kv, _seq, _ts, _id, origin, offset, item, _op, _partial,
                   _after, _fp, _bad
            FROM rows WHERE array_contains(array('customers'), _target)
            UNION ALL
            SELECT _target, '*', CAST(NULL AS array<string>), sequence,
                   timestamp, id, origin, offset, item, 'TRUNCATE', false,
                   CAST(NULL AS map<string,string>), _fp, false
            FROM validated
            WHERE array_contains(array('customers'), _target) AND operation = 'TRUNCATE'
              AND _reject IS NULL))
        WHERE _rs = 1

-- merge rows
SELECT * FROM rows WHERE array_contains(array('orders'), _target)

-- collapsed
SELECT _target, _kj, _kv, _seq, _bad,
                   named_struct('_op', _op, '_ts', _ts, '_id', _id, '_fp', _fp) AS _top,
                   _base_seq, _base_after, _parts, CAST(_n_in AS bigint) AS _n_in,
                   CAST(_n_conf AS bigint) AS _n_conf, CAST(_n_win AS bigint) AS _n_win, _seqs
            FROM (
                SELECT *, _seq AS _base_seq, _after AS _base_after,
                       CAST(array() AS array<struct<s:string, a:map<string,string>>>) AS _parts
                FROM (
            SELECT *, collect_set(CASE WHEN NOT _bad THEN _seq END) OVER (PARTITION BY _target, _kj) AS _seqs,
                   count(*) OVER (PARTITION BY _target, _kj) AS _n_in,
                   sum(CASE WHEN _rs = 1 THEN 1 ELSE 0 END) OVER (PARTITION BY _target, _kj) AS _n_win,
                   sum(CASE WHEN _rs = 1 THEN _nfp - 1 ELSE 0 END) OVER (PARTITION BY _target, _kj) AS _n_conf
            FROM (
              SELECT *,
                     row_number() OVER (PARTITION BY _target, _kj ORDER BY _seq DESC, origin DESC, offset DESC, item DESC) AS _rn,
                     row_number() OVER (PARTITION BY _target, _kj, _seq ORDER BY origin DESC, offset DESC, item DESC) AS _rs,
                     size(collect_set(_fp) OVER (PARTITION BY _target, _kj, _seq)) AS _nfp
              FROM merge_rows)
        )
            ) WHERE _rn = 1

-- staged
SELECT _target, _kj, _kv, _seq, _bad, _top._op AS _op, _top._ts AS _ts,
                   _top._id AS _id, _top._fp AS _fp, _top._op <> 'DELETE' AS _exists, _tomb,
                   NOT _bad AND (_tomb IS NULL OR _seq > _tomb
                                 OR (_seq = _tomb AND _top._op = 'DELETE')) AS _live,
                   array_contains(CAST(array() AS array<string>), _target) AS _soft, _base_seq,
                   CASE WHEN size(_newer) = 0 THEN _base_after ELSE aggregate(_newer, coalesce(_base_after, CAST(map() AS map<string,string>)), (acc, x) -> map_concat(map_filter(acc, (k, v) -> NOT map_contains_key(x.a, k)), x.a)) END AS _img,
                   CASE WHEN size(_newer) = 0 THEN CAST(map() AS map<string,string>) ELSE aggregate(_newer, CAST(map() AS map<string,string>), (acc, x) -> map_concat(map_filter(acc, (k, v) -> NOT map_contains_key(x.a, k)), transform_values(x.a, (k, v) -> x.s))) END AS _cs,
                   _n_in, _n_conf, _n_win,
                   CASE WHEN NOT _bad AND _n_win > 1 AND _tomb IS NOT NULL
                             AND (_seq > _tomb OR (_seq = _tomb AND _top._op = 'DELETE'))
                        THEN size(filter(_seqs, s -> s < _seq AND s <= _tomb)) ELSE 0 END
                     AS _n_buried
            FROM (SELECT c.*, tb.seq AS _tomb, CASE WHEN size(_parts) = 0 THEN _parts ELSE array_sort(filter(_parts, x -> x.s > coalesce(_base_seq, '')), (l, r) -> CASE WHEN l.s < r.s THEN -1 WHEN l.s > r.s THEN 1 ELSE 0 END) END AS _newer FROM collapsed c LEFT JOIN (SELECT t.target, t.key, max(t.seq) AS seq FROM (SELECT target, key, seq FROM cat.`shop__cdcflow`.`tombstones` WHERE target IN ('orders')) t LEFT SEMI JOIN (SELECT element_at(map('customers', 'customers', 'orders', 'orders'), _target) AS _name, _kj FROM collapsed) k ON t.target = k._name AND t.key = k._kj GROUP BY t.target, t.key) tb ON tb.target = element_at(map('customers', 'customers', 'orders', 'orders'), c._target) AND tb.key = c._kj)

-- stats
SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, sum(_n_in) AS n, sum(_n_conf) AS conflicts, sum(_n_win) AS winners, sum(CASE WHEN NOT _live AND NOT _bad THEN _n_win ELSE 0 END) + count_if(_live AND _seq = _tomb) + sum(_n_buried) AS buried, count_if(_live AND NOT _exists) AS deletes, count_if(_live AND (_exists OR _soft)) AS writes, count_if(_live) AS live, 0L AS replaced FROM staged GROUP BY 1, 2 UNION ALL SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, sum(_n_in) AS n, sum(_nfp - 1) AS conflicts, count(*) AS winners, 0L AS buried, count_if(_op IN ('DELETE', 'TRUNCATE')) AS deletes, count_if(_op NOT IN ('DELETE', 'TRUNCATE')) AS writes, count(*) AS live, 0L AS replaced FROM winners GROUP BY 1, 2

-- history log source
SELECT element_at(map('customers', 'customers', 'orders', 'orders'), _target) AS target, _kj AS key, _seq AS seq, _op AS op, _partial AS partial, _after AS image, _ts AS ts, _id AS id, _fp AS fp FROM winners WHERE NOT _bad

-- history log
MERGE INTO cat.`shop__cdcflow`.`history_log` t USING log s
        ON t.target IN ('customers') AND t.target = s.target AND t.key = s.key
           AND t.seq = s.seq
        WHEN MATCHED AND t.fp <> s.fp THEN UPDATE SET op = s.op, partial = s.partial, image = s.image, ts = s.ts, id = s.id, fp = s.fp, logged_at = current_timestamp()
        WHEN NOT MATCHED THEN INSERT (target, key, seq, op, partial, image, ts, id, fp,
                                      logged_at)
          VALUES (s.target, s.key, s.seq, s.op, s.partial, s.image, s.ts, s.id, s.fp,
                  current_timestamp())

-- versions customers
SELECT cast(get(from_json(key, 'array<string>'), 0) as bigint) AS `id`, _vals.c0 AS `name`, cast(_vals.c1 as decimal(10,2)) AS `price`, _vals.c2 AS `note`,
               _start AS __START_AT, _end AS __END_AT, _start_ts AS __START_TIMESTAMP,
               _end_ts AS __END_TIMESTAMP, _end IS NULL AS __CURRENT,
               named_struct('sequence', _last, 'operation', _op, 'event_id', _id,
                            'fingerprint', _fp, 'applied_at', current_timestamp()) AS _cdc,
               _since
        FROM (
          SELECT *, lead(_start) OVER (PARTITION BY key ORDER BY _start) AS _end,
                 lead(_start_ts) OVER (PARTITION BY key ORDER BY _start) AS _end_ts
          FROM (
            SELECT key, _vid, min(seq) AS _start, min_by(ts, seq) AS _start_ts,
                   min_by(_row, seq) AS _version, max_by(named_struct('c0', `_w0`, 'c1', `_w1`, 'c2', `_w2`), seq) AS _vals, max(seq) AS _last,
                   max_by(op, seq) AS _op, max_by(id, seq) AS _id, max_by(fp, seq) AS _fp,
                   max(_since) AS _since
            FROM (
              SELECT *, sum(CASE WHEN _opens OR NOT _row THEN 1 ELSE 0 END)
                          OVER (PARTITION BY key ORDER BY seq
                                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS _vid
              FROM (
                SELECT *, _row AND (lag(seq) OVER (PARTITION BY key, _life ORDER BY seq) IS NULL OR NOT (named_struct('t0', `_w0`) <=> lag(named_struct('t0', `_w0`)) OVER (PARTITION BY key, _life ORDER BY seq))) AS _opens
                FROM (
                  SELECT *, last(CASE WHEN _row AND (NOT partial OR map_contains_key(image, 'name')) THEN named_struct('v', image['name']) END, true) OVER (PARTITION BY key, _life ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW).v AS `_w0`, last(CASE WHEN _row AND (NOT partial OR map_contains_key(image, 'price')) THEN named_struct('v', image['price']) END, true) OVER (PARTITION BY key, _life ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW).v AS `_w1`, last(CASE WHEN _row AND (NOT partial OR map_contains_key(image, 'note')) THEN named_struct('v', image['note']) END, true) OVER (PARTITION BY key, _life ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW).v AS `_w2`
                  FROM (
                    SELECT *, coalesce(sum(CASE WHEN op IN ('DELETE', 'TRUNCATE') THEN 1 ELSE 0 END)
                                OVER (PARTITION BY key ORDER BY seq ROWS BETWEEN
                                      UNBOUNDED PRECEDING AND 1 PRECEDING), 0) AS _life,
                           op NOT IN ('DELETE', 'TRUNCATE') AS _row
                    FROM (
                      SELECT * FROM (
                        SELECT *, max(CASE WHEN op IN ('DELETE', 'TRUNCATE') AND seq < _m THEN seq END)
                                    OVER (PARTITION BY key) AS _since
                        FROM (
                          SELECT e.* FROM (
                            SELECT l.key, l.seq, l.op, l.partial, l.image, l.ts, l.id, l.fp,
                                   k.m AS _m
                            FROM cat.`shop__cdcflow`.`history_log` l JOIN (SELECT _kj AS key, min(_seq) AS m FROM winners WHERE _target = 'customers' AND NOT _bad AND _kj <> '*' GROUP BY _kj) k ON l.key = k.key
                            WHERE l.target = 'customers') e
                          LEFT ANTI JOIN (SELECT seq FROM cat.`shop__cdcflow`.`history_log` WHERE target = 'customers'
                                          AND key = '*') x ON e.seq = x.seq
                          UNION ALL
                          SELECT k.key, x.seq, 'TRUNCATE', false,
                                 CAST(NULL AS map<string,string>), x.ts, x.id, x.fp, k.m
                          FROM (SELECT _kj AS key, min(_seq) AS m FROM winners WHERE _target = 'customers' AND NOT _bad AND _kj <> '*' GROUP BY _kj) k CROSS JOIN (
                            SELECT seq, ts, id, fp FROM cat.`shop__cdcflow`.`history_log`
                            WHERE target = 'customers' AND key = '*') x))
                      WHERE _since IS NULL OR seq > _since)))))
            GROUP BY key, _vid))
        WHERE _version

-- history customers
MERGE INTO cat.`shop`.`customers` t USING (
          SELECT *, false AS _drop FROM versions
          UNION ALL
          SELECT h.`id`, CAST(NULL AS string) AS `name`, CAST(NULL AS decimal(10,2)) AS `price`, CAST(NULL AS string) AS `note`, h.__START_AT, CAST(NULL AS string) AS __END_AT, CAST(NULL AS timestamp) AS __START_TIMESTAMP, CAST(NULL AS timestamp) AS __END_TIMESTAMP, CAST(NULL AS boolean) AS __CURRENT, h._cdc, CAST(NULL AS string) AS _since, true AS _drop
          FROM (
            SELECT h.* FROM cat.`shop`.`customers` h JOIN (SELECT cast(get(from_json(key, 'array<string>'), 0) as bigint) AS `id`, m FROM (SELECT _kj AS key, min(_seq) AS m FROM winners WHERE _target = 'customers' AND NOT _bad AND _kj <> '*' GROUP BY _kj)) k ON h.`id` = k.`id`
            LEFT JOIN (SELECT `id`, max(_since) AS _since,
                              true AS _has
                       FROM versions GROUP BY `id`) b
              ON h.`id` = b.`id`
            WHERE k.m IS NULL OR h.__START_AT >= k.m
               OR (b._has AND (b._since IS NULL OR h.__START_AT > b._since))) h
          LEFT ANTI JOIN versions v ON h.`id` = v.`id` AND h.__START_AT = v.__START_AT
        ) s
        ON t.`id` = s.`id` AND t.__START_AT = s.__START_AT
        WHEN MATCHED AND s._drop THEN DELETE
        WHEN MATCHED AND NOT s._drop AND NOT (t.`name` <=> s.`name` AND t.`price` <=> s.`price` AND t.`note` <=> s.`note` AND t.`__END_AT` <=> s.`__END_AT` AND t.`__START_TIMESTAMP` <=> s.`__START_TIMESTAMP` AND t.`__END_TIMESTAMP` <=> s.`__END_TIMESTAMP` AND t.`__CURRENT` <=> s.`__CURRENT` AND t._cdc.sequence <=> s._cdc.sequence AND t._cdc.fingerprint <=> s._cdc.fingerprint) THEN UPDATE SET `name` = s.`name`, `price` = s.`price`, `note` = s.`note`, `__END_AT` = s.`__END_AT`, `__START_TIMESTAMP` = s.`__START_TIMESTAMP`, `__END_TIMESTAMP` = s.`__END_TIMESTAMP`, `__CURRENT` = s.`__CURRENT`, `_cdc` = s.`_cdc`
        WHEN NOT MATCHED AND NOT s._drop THEN INSERT (`id`, `name`, `price`, `note`, `__START_AT`, `__END_AT`, `__START_TIMESTAMP`, `__END_TIMESTAMP`, `__CURRENT`, `_cdc`)
          VALUES (s.`id`, s.`name`, s.`price`, s.`note`, s.`__START_AT`, s.`__END_AT`, s.`__START_TIMESTAMP`, s.`__END_TIMESTAMP`, s.`__CURRENT`, s.`_cdc`)

-- merge source orders
SELECT *, CASE WHEN size(map_filter(map_from_arrays(array('name', 'price'), array(`_cs0`, `_cs1`)), (k, v) -> v > coalesce(_base_seq, ''))) = 0 THEN NULL ELSE map_filter(map_from_arrays(array('name', 'price'), array(`_cs0`, `_cs1`)), (k, v) -> v > coalesce(_base_seq, '')) END AS _colseqs FROM (SELECT cast(_kv[0] as bigint) AS `_k0`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['name'], _base_seq) <= _tomb THEN NULL ELSE _img['name'] END AS `_c0`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['price'], _base_seq) <= _tomb THEN NULL ELSE cast(_img['price'] as decimal(10,2)) END AS `_c1`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['name'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['name'], _base_seq) END AS `_cs0`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['price'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['price'], _base_seq) END AS `_cs1`, _seq, _op, _ts, _id, _fp, _exists, CASE WHEN _tomb IS NOT NULL AND coalesce(_base_seq, '') <= _tomb THEN _tomb ELSE _base_seq END AS _base_seq FROM staged WHERE _target = 'orders' AND _live)

-- insert orders
INSERT INTO cat.`shop`.`orders` (`id`, `name`, `price`, _cdc) SELECT s.`_k0`, s.`_c0`, s.`_c1`, named_struct('sequence', s._seq, 'row_sequence', coalesce(s._base_seq, ''), 'column_sequences', s._colseqs, 'operation', s._op, 'source_timestamp', s._ts, 'event_id', s._id, 'fingerprint', s._fp, 'deleted', false, 'applied_at', current_timestamp()) FROM source s WHERE s._exists

-- deletes source
SELECT element_at(map('customers', 'customers', 'orders', 'orders'), _target) AS target, _kj AS key, _seq AS seq FROM staged WHERE _live AND NOT _exists AND NOT _soft

-- tombstones
INSERT INTO cat.`shop__cdcflow`.`tombstones` (target, key, seq, deleted_at) SELECT target, key, seq, current_timestamp() FROM deletes
