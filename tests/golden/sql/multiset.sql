-- sequence
(none)

-- validated
SELECT *, CASE WHEN array_contains(array('logs', 'audit'), _target) AND ((operation IN ('UPDATE', 'UPSERT', 'DELETE') AND before IS NULL) OR (partial AND operation IN ('INSERT', 'SNAPSHOT'))) THEN 'IMAGE_INCOMPLETE' WHEN _kv IS NOT NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND ((size(_kv) > 0 AND get(_kv, 0) IS NULL)) THEN 'KEY_MISSING' END AS _reject, CASE WHEN array_contains(array('logs', 'audit'), _target) AND ((operation IN ('UPDATE', 'UPSERT', 'DELETE') AND before IS NULL) OR (partial AND operation IN ('INSERT', 'SNAPSHOT'))) THEN concat(concat('table ', element_at(map('logs', 'logs', 'audit', 'audit'), _target), ' has no key (keys: none): '), CASE WHEN operation IN ('UPDATE', 'UPSERT', 'DELETE') AND before IS NULL THEN concat('a', CASE WHEN operation = 'UPDATE' THEN 'n' ELSE '' END, ' ', operation, ' removes the one row equal to its before image, and this event has none: the producer must send whole before images (PostgreSQL: ALTER TABLE ... REPLICA IDENTITY FULL)') ELSE concat('an ', operation, ' with a partial row image (columns the producer left out) names no row') END) WHEN _kv IS NOT NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND ((size(_kv) > 0 AND get(_kv, 0) IS NULL)) THEN concat('row event lacks a value (of the column type) for key column(s) [', array_join(element_at(map('orders', array('id')), _target), ', '), '] of table ', element_at(map('logs', 'logs', 'audit', 'audit', 'orders', 'orders'), _target)) END AS _reason FROM (SELECT *, CASE WHEN _target IN ('orders') THEN array(CAST(try_cast(coalesce(key['id'], get(from_json(metadata['key_values'], 'array<string>'), 0), (CASE WHEN operation = 'DELETE' THEN before ELSE after END)['id']) AS bigint) AS string)) END AS _kv FROM events)

-- rejected
SELECT * FROM validated WHERE _reject IS NOT NULL

-- rows
SELECT _target, v.k AS _kv,
                   CASE WHEN _reject IS NULL THEN to_json(v.k) ELSE concat('!', _reject) END
                     AS _kj,
                   sequence AS _seq, timestamp AS _ts, id AS _id, origin, offset, item,
                   v.op AS _op, partial AND v.op <> 'DELETE' AS _partial, v.a AS _after,
                   v.fp AS _fp, _reject IS NOT NULL AS _bad
            FROM (SELECT *, CASE WHEN _target IN ('orders') THEN array(CAST(try_cast(before['id'] AS bigint) AS string)) END AS _okv FROM validated
                  WHERE array_contains(array('orders'), _target) AND (_reject IS NOT NULL
                    OR (operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT')
                        AND sequence > coalesce(element_at(CAST(map() AS map<string,string>), _target), ''))))
            LATERAL VIEW explode(
              CASE WHEN _reject IS NULL THEN CASE WHEN operation IN ('UPDATE', 'UPSERT') AND before IS NOT NULL AND NOT ((size(_okv) > 0 AND get(_okv, 0) IS NULL)) AND _okv <> _kv THEN array(named_struct('k', _kv, 'op', operation, 'a', CASE WHEN operation <> 'DELETE' THEN after WHEN array_contains(CAST(array() AS array<string>), _target) THEN before END, 'fp', _fp), named_struct('k', _okv, 'op', 'DELETE', 'a', CAST(NULL AS map<string,string>), 'fp', _fp + 1)) ELSE array(named_struct('k', _kv, 'op', operation, 'a', CASE WHEN operation <> 'DELETE' THEN after WHEN array_contains(CAST(array() AS array<string>), _target) THEN before END, 'fp', _fp)) END
                   ELSE array(named_struct('k', _kv, 'op', operation, 'a', CAST(NULL AS map<string,string>), 'fp', _fp))
              END) e AS v

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
              FROM rows)
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
            FROM (SELECT c.*, tb.seq AS _tomb, CASE WHEN size(_parts) = 0 THEN _parts ELSE array_sort(filter(_parts, x -> x.s > coalesce(_base_seq, '')), (l, r) -> CASE WHEN l.s < r.s THEN -1 WHEN l.s > r.s THEN 1 ELSE 0 END) END AS _newer FROM collapsed c LEFT JOIN (SELECT t.target, t.key, max(t.seq) AS seq FROM (SELECT target, key, seq FROM cat.`shop__cdcflow`.`tombstones` WHERE target IN ('orders')) t LEFT SEMI JOIN (SELECT element_at(map('logs', 'logs', 'audit', 'audit', 'orders', 'orders'), _target) AS _name, _kj FROM collapsed) k ON t.target = k._name AND t.key = k._kj GROUP BY t.target, t.key) tb ON tb.target = element_at(map('logs', 'logs', 'audit', 'audit', 'orders', 'orders'), c._target) AND tb.key = c._kj)

-- multiset winners
SELECT _target, _eid AS _id, sequence AS _seq, operation AS _op, timestamp AS _ts, _fp,
               CASE WHEN operation IN ('UPDATE', 'UPSERT', 'DELETE') THEN CASE _target WHEN 'logs' THEN sha2(concat_ws('', CASE WHEN before['id'] IS NULL THEN NULL ELSE concat('2:id', CAST(length(coalesce(CAST(try_cast(before['id'] AS bigint) AS string), concat('?', before['id']))) AS string), ':', coalesce(CAST(try_cast(before['id'] AS bigint) AS string), concat('?', before['id']))) END, CASE WHEN before['name'] IS NULL THEN NULL ELSE concat('4:name', CAST(length(before['name']) AS string), ':', before['name']) END, CASE WHEN before['price'] IS NULL THEN NULL ELSE concat('5:price', CAST(length(coalesce(CAST(try_cast(before['price'] AS decimal(10,2)) AS string), concat('?', before['price']))) AS string), ':', coalesce(CAST(try_cast(before['price'] AS decimal(10,2)) AS string), concat('?', before['price']))) END), 256) WHEN 'audit' THEN sha2(concat_ws('', CASE WHEN before['at'] IS NULL THEN NULL ELSE concat('2:at', CAST(length(coalesce(CAST(try_cast(before['at'] AS timestamp) AS string), concat('?', before['at']))) AS string), ':', coalesce(CAST(try_cast(before['at'] AS timestamp) AS string), concat('?', before['at']))) END, CASE WHEN before['what'] IS NULL THEN NULL ELSE concat('4:what', CAST(length(before['what']) AS string), ':', before['what']) END), 256) END END AS _bh,
               CASE WHEN operation <> 'DELETE' THEN CASE _target WHEN 'logs' THEN sha2(concat_ws('', CASE WHEN _whole['id'] IS NULL THEN NULL ELSE concat('2:id', CAST(length(coalesce(CAST(try_cast(_whole['id'] AS bigint) AS string), concat('?', _whole['id']))) AS string), ':', coalesce(CAST(try_cast(_whole['id'] AS bigint) AS string), concat('?', _whole['id']))) END, CASE WHEN _whole['name'] IS NULL THEN NULL ELSE concat('4:name', CAST(length(_whole['name']) AS string), ':', _whole['name']) END, CASE WHEN _whole['price'] IS NULL THEN NULL ELSE concat('5:price', CAST(length(coalesce(CAST(try_cast(_whole['price'] AS decimal(10,2)) AS string), concat('?', _whole['price']))) AS string), ':', coalesce(CAST(try_cast(_whole['price'] AS decimal(10,2)) AS string), concat('?', _whole['price']))) END), 256) WHEN 'audit' THEN sha2(concat_ws('', CASE WHEN _whole['at'] IS NULL THEN NULL ELSE concat('2:at', CAST(length(coalesce(CAST(try_cast(_whole['at'] AS timestamp) AS string), concat('?', _whole['at']))) AS string), ':', coalesce(CAST(try_cast(_whole['at'] AS timestamp) AS string), concat('?', _whole['at']))) END, CASE WHEN _whole['what'] IS NULL THEN NULL ELSE concat('4:what', CAST(length(_whole['what']) AS string), ':', _whole['what']) END), 256) END END AS _ah,
               CASE WHEN operation <> 'DELETE' THEN _whole END AS _after,
               CAST(_n_in AS bigint) AS _n_in, CAST(_nfp AS bigint) AS _nfp
        FROM (
          SELECT *, row_number() OVER (PARTITION BY _target, _eid ORDER BY origin DESC, offset DESC, item DESC)
                      AS _rs,
                 count(*) OVER (PARTITION BY _target, _eid) AS _n_in, size(collect_set(_fp) OVER (PARTITION BY _target, _eid)) AS _nfp
          FROM (SELECT *, CASE WHEN partial AND before IS NOT NULL THEN map_concat(map_filter(before, (k, v) -> NOT map_contains_key(after, k)), after) ELSE after END AS _whole, CASE WHEN id LIKE 'cdc-%' THEN concat(id, ':', CAST(_fp AS string)) ELSE id END AS _eid FROM validated
                WHERE array_contains(array('logs', 'audit'), _target) AND _reject IS NULL
                  AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT')
                  AND sequence > coalesce(element_at(map('audit', 'p9'), _target), '')))
        WHERE _rs = 1

-- multiset staged
SELECT w.*, CASE WHEN l.id IS NULL THEN 'new' WHEN l.pipeline = 'pipe' AND l.batch_id = 7 THEN 'own' WHEN l.fp = w._fp THEN 'dup' ELSE 'replace' END AS _status, l.bh AS _lbh, l.ah AS _lah, l.prev_bh AS _lpbh,
               l.prev_ah AS _lpah
        FROM mset w LEFT JOIN (
          SELECT l.target, l.id, l.fp, l.bh, l.ah, l.prev_bh, l.prev_ah, l.pipeline, l.batch_id
          FROM (SELECT * FROM cat.`shop__cdcflow`.`multiset_log` WHERE target IN ('audit', 'logs')) l
          LEFT SEMI JOIN (SELECT element_at(map('logs', 'logs', 'audit', 'audit'), _target) AS _name, _id FROM mset) k
            ON l.target = k._name AND l.id = k._id) l
        ON l.target = element_at(map('logs', 'logs', 'audit', 'audit'), w._target) AND l.id = w._id

-- stats
SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, sum(_n_in) AS n, sum(_n_conf) AS conflicts, sum(_n_win) AS winners, sum(CASE WHEN NOT _live AND NOT _bad THEN _n_win ELSE 0 END) + count_if(_live AND _seq = _tomb) + sum(_n_buried) AS buried, count_if(_live AND NOT _exists) AS deletes, count_if(_live AND (_exists OR _soft)) AS writes, count_if(_live) AS live, 0L AS replaced FROM staged GROUP BY 1, 2 UNION ALL SELECT _target, CAST(NULL AS string) AS code, 0L AS n, 0L AS conflicts, 0L AS winners, count(*) AS buried, 0L AS deletes, 0L AS writes, 0L AS live, 0L AS replaced FROM validated WHERE _reject IS NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND array_contains(array('audit'), _target) AND NOT coalesce(sequence > element_at(map('audit', 'p9'), _target), false) GROUP BY 1 UNION ALL SELECT _target, CAST(NULL AS string) AS code, sum(_n_in) AS n, sum(_nfp - 1) AS conflicts, count_if(_status <> 'dup') AS winners, 0L AS buried, count_if(_status <> 'dup' AND _op = 'DELETE') AS deletes, count_if(_status <> 'dup') AS writes, count_if(_status IN ('new', 'replace')) AS live, count_if(_status = 'replace') AS replaced FROM multiset GROUP BY 1 UNION ALL SELECT _target, _reject AS code, count(*) AS n, 0L AS conflicts, 0L AS winners, 0L AS buried, 0L AS deletes, 0L AS writes, 0L AS live, 0L AS replaced FROM validated WHERE _reject IS NOT NULL AND NOT array_contains(array('orders'), _target) GROUP BY 1, 2

-- multiset log source
SELECT element_at(map('logs', 'logs', 'audit', 'audit'), _target) AS target, _id AS id, _fp AS fp, _seq AS seq, _op AS op, _bh AS bh, _ah AS ah, _after AS image, _ts AS ts FROM multiset WHERE _status IN ('new', 'replace')

-- multiset log
INSERT INTO cat.`shop__cdcflow`.`multiset_log` (target, id, fp, seq, op, bh, ah, image, ts, prev_bh, prev_ah, pipeline, batch_id, logged_at) SELECT target, id, fp, seq, op, bh, ah, image, ts, CAST(NULL AS string), CAST(NULL AS string), 'pipe', 7, current_timestamp() FROM mlog

-- multiset log (replacing)
MERGE INTO cat.`shop__cdcflow`.`multiset_log` t USING mlog s
        ON t.target IN ('audit', 'logs') AND t.target = s.target AND t.id = s.id
        WHEN MATCHED THEN UPDATE SET fp = s.fp, seq = s.seq, op = s.op, bh = s.bh, ah = s.ah, image = s.image, ts = s.ts, prev_bh = t.bh, prev_ah = t.ah,
          pipeline = 'pipe', batch_id = 7, logged_at = current_timestamp()
        WHEN NOT MATCHED THEN INSERT (target, id, fp, seq, op, bh, ah, image, ts, prev_bh, prev_ah, pipeline, batch_id, logged_at)
          VALUES (s.target, s.id, s.fp, s.seq, s.op, s.bh, s.ah, s.image, s.ts,
                  CAST(NULL AS string), CAST(NULL AS string), 'pipe', 7, current_timestamp())

-- touched logs
SELECT DISTINCT h FROM multiset LATERAL VIEW explode(array(_bh, _ah, CASE WHEN _status = 'replace' THEN _lbh END, CASE WHEN _status = 'replace' THEN _lah END, CASE WHEN _status = 'own' THEN _lpbh END, CASE WHEN _status = 'own' THEN _lpah END)) e AS h WHERE _target = 'logs' AND _status <> 'dup' AND h IS NOT NULL

-- copies logs
SELECT k.h AS _h, CASE WHEN e.i = 0 THEN greatest(coalesce(c.n, 0L), 0L) ELSE e.i END AS _copy,
               e.i = 0 AS _trim, cast(c.img['id'] as bigint) AS `_c0`, c.img['name'] AS `_c1`, cast(c.img['price'] as decimal(10,2)) AS `_c2`
        FROM touched k LEFT JOIN (
          SELECT x.h, sum(x.d) AS n,
                 max_by(x.a, CASE WHEN x.a IS NOT NULL THEN x.s END) AS img
          FROM (SELECT ah AS h, 1L AS d, image AS a, seq AS s FROM cat.`shop__cdcflow`.`multiset_log`
                WHERE target = 'logs' AND ah IS NOT NULL AND seq > ''
                UNION ALL
                SELECT bh, -1L, CAST(NULL AS map<string,string>), seq FROM cat.`shop__cdcflow`.`multiset_log`
                WHERE target = 'logs' AND bh IS NOT NULL AND seq > '') x
          LEFT SEMI JOIN touched t ON x.h = t.h
          GROUP BY x.h) c ON k.h = c.h
        LATERAL VIEW explode(sequence(0L, greatest(coalesce(c.n, 0L), 0L))) e AS i

-- multiset logs
MERGE INTO cat.`shop`.`logs` t USING copies s
        ON t._cdc.image = s._h
           AND CASE WHEN s._trim THEN t._cdc.copy > s._copy ELSE t._cdc.copy = s._copy END
        WHEN MATCHED AND s._trim THEN DELETE
        WHEN NOT MATCHED AND NOT s._trim THEN INSERT (`id`, `name`, `price`, _cdc) VALUES (s.`_c0`, s.`_c1`, s.`_c2`, named_struct('image', s._h, 'copy', s._copy, 'applied_at', current_timestamp()))

-- touched audit
SELECT DISTINCT h FROM cat.`shop__cdcflow`.`multiset_log` LATERAL VIEW explode(array(bh, ah)) e AS h WHERE target = 'audit' AND seq > 'p9' AND h IS NOT NULL

-- copies audit
SELECT k.h AS _h, CASE WHEN e.i = 0 THEN greatest(coalesce(c.n, 0L), 0L) ELSE e.i END AS _copy,
               e.i = 0 AS _trim, cast(c.img['at'] as timestamp) AS `_c0`, c.img['what'] AS `_c1`
        FROM touched k LEFT JOIN (
          SELECT x.h, sum(x.d) AS n,
                 max_by(x.a, CASE WHEN x.a IS NOT NULL THEN x.s END) AS img
          FROM (SELECT ah AS h, 1L AS d, image AS a, seq AS s FROM cat.`shop__cdcflow`.`multiset_log`
                WHERE target = 'audit' AND ah IS NOT NULL AND seq > 'p9'
                UNION ALL
                SELECT bh, -1L, CAST(NULL AS map<string,string>), seq FROM cat.`shop__cdcflow`.`multiset_log`
                WHERE target = 'audit' AND bh IS NOT NULL AND seq > 'p9') x

          GROUP BY x.h) c ON k.h = c.h
        LATERAL VIEW explode(sequence(0L, greatest(coalesce(c.n, 0L), 0L))) e AS i

-- multiset audit
INSERT INTO cat.`shop`.`audit` (`at`, `what`, _cdc) SELECT s.`_c0`, s.`_c1`, named_struct('image', s._h, 'copy', s._copy, 'applied_at', current_timestamp()) FROM copies s WHERE NOT s._trim

-- merge source orders
SELECT *, CASE WHEN size(map_filter(map_from_arrays(array('name', 'price'), array(`_cs0`, `_cs1`)), (k, v) -> v > coalesce(_base_seq, ''))) = 0 THEN NULL ELSE map_filter(map_from_arrays(array('name', 'price'), array(`_cs0`, `_cs1`)), (k, v) -> v > coalesce(_base_seq, '')) END AS _colseqs FROM (SELECT cast(_kv[0] as bigint) AS `_k0`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['name'], _base_seq) <= _tomb THEN NULL ELSE _img['name'] END AS `_c0`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['price'], _base_seq) <= _tomb THEN NULL ELSE cast(_img['price'] as decimal(10,2)) END AS `_c1`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['name'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['name'], _base_seq) END AS `_cs0`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['price'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['price'], _base_seq) END AS `_cs1`, _seq, _op, _ts, _id, _fp, _exists, CASE WHEN _tomb IS NOT NULL AND coalesce(_base_seq, '') <= _tomb THEN _tomb ELSE _base_seq END AS _base_seq FROM staged WHERE _target = 'orders' AND _live)

-- merge orders
MERGE INTO cat.`shop`.`orders` t USING source s ON t.`id` = s.`_k0`

        WHEN MATCHED AND NOT s._exists AND s._seq > t._cdc.sequence THEN DELETE
        WHEN MATCHED AND (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint) OR s.`_cs0` > coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence) OR s.`_cs1` > coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence)) THEN UPDATE SET `name` = CASE WHEN (s.`_cs0` > coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence) OR (s.`_cs0` = coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence) AND (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint))) THEN s.`_c0` ELSE t.`name` END, `price` = CASE WHEN (s.`_cs1` > coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence) OR (s.`_cs1` = coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence) AND (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint))) THEN s.`_c1` ELSE t.`price` END, _cdc = named_struct('sequence', greatest(s._seq, t._cdc.sequence), 'row_sequence', CASE WHEN s._base_seq > t._cdc.row_sequence OR t._cdc.row_sequence IS NULL THEN s._base_seq ELSE t._cdc.row_sequence END, 'column_sequences', CASE WHEN size(map_filter(map_from_arrays(array('name', 'price'), array(greatest(s.`_cs0`, coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence)), greatest(s.`_cs1`, coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence)))), (k, v) -> v > coalesce(CASE WHEN s._base_seq > t._cdc.row_sequence OR t._cdc.row_sequence IS NULL THEN s._base_seq ELSE t._cdc.row_sequence END, ''))) = 0 THEN NULL ELSE map_filter(map_from_arrays(array('name', 'price'), array(greatest(s.`_cs0`, coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence)), greatest(s.`_cs1`, coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence)))), (k, v) -> v > coalesce(CASE WHEN s._base_seq > t._cdc.row_sequence OR t._cdc.row_sequence IS NULL THEN s._base_seq ELSE t._cdc.row_sequence END, '')) END, 'operation', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN s._op ELSE t._cdc.operation END, 'source_timestamp', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN s._ts ELSE t._cdc.source_timestamp END, 'event_id', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN s._id ELSE t._cdc.event_id END, 'fingerprint', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN s._fp ELSE t._cdc.fingerprint END, 'deleted', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN false ELSE t._cdc.deleted END, 'applied_at', current_timestamp())
        WHEN NOT MATCHED AND s._exists THEN INSERT (`id`, `name`, `price`, _cdc) VALUES (s.`_k0`, s.`_c0`, s.`_c1`, named_struct('sequence', s._seq, 'row_sequence', coalesce(s._base_seq, ''), 'column_sequences', s._colseqs, 'operation', s._op, 'source_timestamp', s._ts, 'event_id', s._id, 'fingerprint', s._fp, 'deleted', false, 'applied_at', current_timestamp()))

-- deletes source
SELECT element_at(map('logs', 'logs', 'audit', 'audit', 'orders', 'orders'), _target) AS target, _kj AS key, _seq AS seq FROM staged WHERE _live AND NOT _exists AND NOT _soft

-- tombstones
INSERT INTO cat.`shop__cdcflow`.`tombstones` (target, key, seq, deleted_at) SELECT target, key, seq, current_timestamp() FROM deletes
