-- sequence
CASE _target WHEN 'orders' THEN concat(CASE WHEN try_cast(coalesce(after['version'], before['version']) AS decimal(38,0)) >= 0 THEN concat('p', lpad(CAST(length(CAST(abs(try_cast(coalesce(after['version'], before['version']) AS decimal(38,0))) AS string)) AS string), 2, '0'), CAST(abs(try_cast(coalesce(after['version'], before['version']) AS decimal(38,0))) AS string), '!') ELSE concat('n', lpad(CAST(99 - length(CAST(abs(try_cast(coalesce(after['version'], before['version']) AS decimal(38,0))) AS string)) AS string), 2, '0'), translate(CAST(abs(try_cast(coalesce(after['version'], before['version']) AS decimal(38,0))) AS string), '0123456789', '9876543210'), '!') END) ELSE sequence END

-- newest truncates
SELECT _target, max(sequence) AS seq FROM trunc WHERE operation = 'TRUNCATE' AND error_code IS NULL AND array_contains(array('orders'), _target) GROUP BY _target

-- validated
SELECT *, CASE WHEN array_contains(array('orders'), _target) AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT', 'TRUNCATE') AND sequence IS NULL THEN 'SEQUENCE_MISSING' WHEN _kv IS NOT NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND ((size(_kv) > 0 AND get(_kv, 0) IS NULL)) THEN 'KEY_MISSING' END AS _reject, CASE WHEN array_contains(array('orders'), _target) AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT', 'TRUNCATE') AND sequence IS NULL THEN element_at(map('orders', 'the event lacks a value of column(s) \'version\', or one of a type that orders (integer, date, timestamp, text), which order table orders\'s events (sequence_by)'), _target) WHEN _kv IS NOT NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND ((size(_kv) > 0 AND get(_kv, 0) IS NULL)) THEN concat('row event lacks a value (of the column type) for key column(s) [', array_join(element_at(map('orders', array('id')), _target), ', '), '] of table ', element_at(map('audit', 'audit', 'orders', 'orders'), _target)) END AS _reason FROM (SELECT *, CASE WHEN _target IN ('orders') THEN array(CAST(try_cast(coalesce(key['id'], get(from_json(metadata['key_values'], 'array<string>'), 0), (CASE WHEN operation = 'DELETE' THEN before ELSE after END)['id']) AS bigint) AS string)) END AS _kv FROM events)

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
                        AND sequence > coalesce(element_at(map('orders', 'p0210!'), _target), ''))))
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
            SELECT *, CAST(NULL AS array<string>) AS _seqs,
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
            FROM (SELECT c.*, CAST(NULL AS string) AS _tomb, CASE WHEN size(_parts) = 0 THEN _parts ELSE array_sort(filter(_parts, x -> x.s > coalesce(_base_seq, '')), (l, r) -> CASE WHEN l.s < r.s THEN -1 WHEN l.s > r.s THEN 1 ELSE 0 END) END AS _newer FROM collapsed c )

-- stats
SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, sum(_n_in) AS n, sum(_n_conf) AS conflicts, sum(_n_win) AS winners, sum(CASE WHEN NOT _live AND NOT _bad THEN _n_win ELSE 0 END) + count_if(_live AND _seq = _tomb) + sum(_n_buried) AS buried, count_if(_live AND NOT _exists) AS deletes, count_if(_live AND (_exists OR _soft)) AS writes, count_if(_live) AS live, 0L AS replaced FROM staged GROUP BY 1, 2 UNION ALL SELECT _target, CAST(NULL AS string) AS code, 0L AS n, 0L AS conflicts, 0L AS winners, count(*) AS buried, 0L AS deletes, 0L AS writes, 0L AS live, 0L AS replaced FROM validated WHERE _reject IS NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND array_contains(array('orders'), _target) AND NOT coalesce(sequence > element_at(map('orders', 'p0210!'), _target), false) GROUP BY 1

-- changelog source audit
SELECT named_struct('operation', operation, 'sequence', sequence,
                                    'source_timestamp', timestamp, 'event_id', id,
                                    'fingerprint', _fp, 'transaction_id', transaction_id,
                                    'partial', partial, 'applied_at', current_timestamp()) AS _cdc,
                       CASE WHEN before IS NULL THEN NULL ELSE named_struct('id', cast(before['id'] as bigint), 'name', before['name'], 'price', cast(before['price'] as decimal(10,2))) END AS before, CASE WHEN after IS NULL THEN NULL ELSE named_struct('id', cast(after['id'] as bigint), 'name', after['name'], 'price', cast(after['price'] as decimal(10,2))) END AS after
                FROM (SELECT *, row_number() OVER (PARTITION BY id, _fp
                                                   ORDER BY origin, offset, item) AS _rn
                      FROM validated
                      WHERE _target = 'audit' AND _reject IS NULL
                        AND operation IN ('INSERT','UPDATE','UPSERT','SNAPSHOT','DELETE',
                                          'TRUNCATE'))
                WHERE _rn = 1

-- changelog audit
MERGE INTO cat.`shop`.`audit` t USING changelog s
        ON t._cdc.event_id = s._cdc.event_id AND t._cdc.fingerprint = s._cdc.fingerprint
        WHEN NOT MATCHED THEN INSERT *

-- truncate orders
DELETE FROM cat.`shop`.`orders` WHERE _cdc.sequence < 'p0210!'

-- merge source orders
SELECT *, CASE WHEN size(map_filter(map_from_arrays(array('name', 'price', 'version'), array(`_cs0`, `_cs1`, `_cs2`)), (k, v) -> v > coalesce(_base_seq, ''))) = 0 THEN NULL ELSE map_filter(map_from_arrays(array('name', 'price', 'version'), array(`_cs0`, `_cs1`, `_cs2`)), (k, v) -> v > coalesce(_base_seq, '')) END AS _colseqs FROM (SELECT cast(_kv[0] as bigint) AS `_k0`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['name'], _base_seq) <= _tomb THEN NULL ELSE _img['name'] END AS `_c0`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['price'], _base_seq) <= _tomb THEN NULL ELSE cast(_img['price'] as decimal(10,2)) END AS `_c1`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['version'], _base_seq) <= _tomb THEN NULL ELSE cast(_img['version'] as bigint) END AS `_c2`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['name'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['name'], _base_seq) END AS `_cs0`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['price'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['price'], _base_seq) END AS `_cs1`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['version'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['version'], _base_seq) END AS `_cs2`, _seq, _op, _ts, _id, _fp, _exists, CASE WHEN _tomb IS NOT NULL AND coalesce(_base_seq, '') <= _tomb THEN _tomb ELSE _base_seq END AS _base_seq FROM staged WHERE _target = 'orders' AND _live)

-- insert orders
INSERT INTO cat.`shop`.`orders` (`id`, `name`, `price`, `version`, _cdc) SELECT s.`_k0`, s.`_c0`, s.`_c1`, s.`_c2`, named_struct('sequence', s._seq, 'row_sequence', coalesce(s._base_seq, ''), 'column_sequences', s._colseqs, 'operation', s._op, 'source_timestamp', s._ts, 'event_id', s._id, 'fingerprint', s._fp, 'deleted', false, 'applied_at', current_timestamp()) FROM source s WHERE s._exists

-- deletes source
SELECT element_at(map('audit', 'audit', 'orders', 'orders'), _target) AS target, _kj AS key, _seq AS seq FROM staged WHERE _live AND NOT _exists AND NOT _soft

-- tombstones
INSERT INTO cat.`shop__cdcflow`.`tombstones` (target, key, seq, deleted_at) SELECT target, key, seq, current_timestamp() FROM deletes
