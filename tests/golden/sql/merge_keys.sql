-- sequence
(none)

-- validated
SELECT *, CASE WHEN _kv IS NOT NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND ((size(_kv) > 0 AND get(_kv, 0) IS NULL)) THEN 'KEY_MISSING' END AS _reject, CASE WHEN _kv IS NOT NULL AND operation IN ('DELETE', 'INSERT', 'SNAPSHOT', 'UPDATE', 'UPSERT') AND ((size(_kv) > 0 AND get(_kv, 0) IS NULL)) THEN concat('row event lacks a value (of the column type) for key column(s) [', array_join(element_at(map('orders', array('id')), _target), ', '), '] of table ', element_at(map('orders', 'orders'), _target)) END AS _reason FROM (SELECT *, CASE WHEN _target IN ('orders') THEN array(CAST(try_cast(coalesce(key['id'], get(from_json(metadata['key_values'], 'array<string>'), 0), (CASE WHEN operation = 'DELETE' THEN before ELSE after END)['id']) AS bigint) AS string)) END AS _kv FROM events)

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
SELECT _target, CASE WHEN _bad THEN substring(_kj, 2) END AS code, sum(_n_in) AS n, sum(_n_conf) AS conflicts, sum(_n_win) AS winners, sum(CASE WHEN NOT _live AND NOT _bad THEN _n_win ELSE 0 END) + count_if(_live AND _seq = _tomb) + sum(_n_buried) AS buried, count_if(_live AND NOT _exists) AS deletes, count_if(_live AND (_exists OR _soft)) AS writes, count_if(_live) AS live, 0L AS replaced FROM staged GROUP BY 1, 2

-- merge source orders
SELECT *, CASE WHEN size(map_filter(map_from_arrays(array('name', 'price'), array(`_cs0`, `_cs1`)), (k, v) -> v > coalesce(_base_seq, ''))) = 0 THEN NULL ELSE map_filter(map_from_arrays(array('name', 'price'), array(`_cs0`, `_cs1`)), (k, v) -> v > coalesce(_base_seq, '')) END AS _colseqs FROM (SELECT cast(_kv[0] as bigint) AS `_k0`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['name'], _base_seq) <= _tomb THEN NULL ELSE _img['name'] END AS `_c0`, CASE WHEN _tomb IS NOT NULL AND coalesce(_cs['price'], _base_seq) <= _tomb THEN NULL ELSE cast(_img['price'] as decimal(10,2)) END AS `_c1`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['name'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['name'], _base_seq) END AS `_cs0`, CASE WHEN _tomb IS NOT NULL AND coalesce(coalesce(_cs['price'], _base_seq), '') <= _tomb THEN _tomb ELSE coalesce(_cs['price'], _base_seq) END AS `_cs1`, _seq, _op, _ts, _id, _fp, _exists, CASE WHEN _tomb IS NOT NULL AND coalesce(_base_seq, '') <= _tomb THEN _tomb ELSE _base_seq END AS _base_seq FROM staged WHERE _target = 'orders' AND _live)

-- merge orders
MERGE INTO cat.`shop`.`orders` t USING source s ON t.`id` = s.`_k0`

        WHEN MATCHED AND NOT s._exists AND s._seq > t._cdc.sequence THEN DELETE
        WHEN MATCHED AND (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint) OR s.`_cs0` > coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence) OR s.`_cs1` > coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence)) THEN UPDATE SET `name` = CASE WHEN (s.`_cs0` > coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence) OR (s.`_cs0` = coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence) AND (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint))) THEN s.`_c0` ELSE t.`name` END, `price` = CASE WHEN (s.`_cs1` > coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence) OR (s.`_cs1` = coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence) AND (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint))) THEN s.`_c1` ELSE t.`price` END, _cdc = named_struct('sequence', greatest(s._seq, t._cdc.sequence), 'row_sequence', CASE WHEN s._base_seq > t._cdc.row_sequence OR t._cdc.row_sequence IS NULL THEN s._base_seq ELSE t._cdc.row_sequence END, 'column_sequences', CASE WHEN size(map_filter(map_from_arrays(array('name', 'price'), array(greatest(s.`_cs0`, coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence)), greatest(s.`_cs1`, coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence)))), (k, v) -> v > coalesce(CASE WHEN s._base_seq > t._cdc.row_sequence OR t._cdc.row_sequence IS NULL THEN s._base_seq ELSE t._cdc.row_sequence END, ''))) = 0 THEN NULL ELSE map_filter(map_from_arrays(array('name', 'price'), array(greatest(s.`_cs0`, coalesce(t._cdc.column_sequences['name'], t._cdc.row_sequence)), greatest(s.`_cs1`, coalesce(t._cdc.column_sequences['price'], t._cdc.row_sequence)))), (k, v) -> v > coalesce(CASE WHEN s._base_seq > t._cdc.row_sequence OR t._cdc.row_sequence IS NULL THEN s._base_seq ELSE t._cdc.row_sequence END, '')) END, 'operation', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN s._op ELSE t._cdc.operation END, 'source_timestamp', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN s._ts ELSE t._cdc.source_timestamp END, 'event_id', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN s._id ELSE t._cdc.event_id END, 'fingerprint', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN s._fp ELSE t._cdc.fingerprint END, 'deleted', CASE WHEN (s._seq > t._cdc.sequence OR (s._seq = t._cdc.sequence AND s._fp <> t._cdc.fingerprint)) THEN false ELSE t._cdc.deleted END, 'applied_at', current_timestamp())
        WHEN NOT MATCHED AND s._exists THEN INSERT (`id`, `name`, `price`, _cdc) VALUES (s.`_k0`, s.`_c0`, s.`_c1`, named_struct('sequence', s._seq, 'row_sequence', coalesce(s._base_seq, ''), 'column_sequences', s._colseqs, 'operation', s._op, 'source_timestamp', s._ts, 'event_id', s._id, 'fingerprint', s._fp, 'deleted', false, 'applied_at', current_timestamp()))

-- deletes source
SELECT element_at(map('orders', 'orders'), _target) AS target, _kj AS key, _seq AS seq FROM staged WHERE _live AND NOT _exists AND NOT _soft

-- tombstones
INSERT INTO cat.`shop__cdcflow`.`tombstones` (target, key, seq, deleted_at) SELECT target, key, seq, current_timestamp() FROM deletes
