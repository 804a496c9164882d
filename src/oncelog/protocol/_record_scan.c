/*
 * The record scanner of oncelog.protocol.record_scan, in C: one pass over the records of
 * a v2 batch (after decompression), checking their structure without building any Python
 * object per record. The pure-Python scanner in record_scan.py is the reference: both
 * return the same tuple for every input (a hypothesis test compares them), so the rules
 * are documented there, once.
 *
 * scan(records, count, need_keys) ->
 *     (fault, index, value, min_timestamp_delta, max_timestamp_delta, first_keyless)
 *
 * columns([(records, count, base_offset, base_timestamp, max_timestamp, log_append_time,
 *           low, high), ...]) ->
 *     (rows, offsets, timestamps, timestamp_types, key_validity, key_nulls, key_offsets,
 *      key_data, value_validity, value_nulls, value_offsets, value_data)
 * the same walk over the records of several batches, each checked as scan checks it, and
 * the records with offsets in [low, high) copied into Arrow buffers (the Spark reader's
 * columns, oncelog.spark.record_columns documents them); ValueError on a fault.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Keep in step with record_scan.py (Fault and SCANNER_ABI). */
enum fault {
    OK = 0,
    TRUNCATED = 1,          /* a field runs past the end of its record, or of the records */
    VARINT_TOO_LONG = 2,    /* more bytes, or more bits, than the field's type holds */
    BAD_RECORD_LENGTH = 3,  /* negative, or shorter than the smallest record */
    LENGTH_MISMATCH = 4,    /* the fields end before the declared record length */
    OFFSET_DELTA = 5,       /* record i does not carry offset delta i */
    BAD_FIELD_LENGTH = 6,   /* key, value or header value length below -1 */
    BAD_HEADER_COUNT = 7,   /* negative number of headers */
    BAD_HEADER_KEY = 8,     /* header key length below 0 (null header keys are invalid) */
    TRAILING_BYTES = 9,     /* bytes left after the declared number of records */
    COUNT_TOO_LARGE = 10,   /* more records declared than the bytes could hold */
};

#define SCANNER_ABI 2
#define MIN_RECORD_BYTES 7  /* length + attributes + five one-byte varints */

typedef struct {
    const uint8_t *start; /* of all the records: positions are reported from here */
    const uint8_t *p;
    const uint8_t *end;   /* of the current record (or of all the records) */
    int fault;
    int64_t value;        /* what the fault is about: see record_scan.py */
} cursor;

static int fail(cursor *c, int fault, int64_t value)
{
    c->fault = fault;
    c->value = value;
    return 0;
}

/* Zigzag varint of at most max_bytes bytes whose value fits in `bits` bits. */
static int read_varint(cursor *c, int max_bytes, int bits, int64_t *out)
{
    const uint8_t *field = c->p;
    uint64_t z = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (c->p >= c->end)
            return fail(c, TRUNCATED, field - c->start);
        uint8_t b = *c->p++;
        int shift = 7 * i;
        uint64_t part = (uint64_t)(b & 0x7F);
        if (shift + 7 > bits && (part >> (bits - shift)) != 0)
            return fail(c, VARINT_TOO_LONG, field - c->start);
        z |= part << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)(z >> 1) ^ -(int64_t)(z & 1);
            return 1;
        }
    }
    return fail(c, VARINT_TOO_LONG, field - c->start);
}

/* Skip a length-prefixed field whose length may not be below min_len (else `fault`);
 * *data is where its bytes start (when data is not NULL). */
static int skip_field(cursor *c, int64_t min_len, int fault, int64_t *out_len,
                      const uint8_t **data)
{
    const uint8_t *field = c->p;
    int64_t len;
    if (!read_varint(c, 5, 32, &len))
        return 0;
    if (len < min_len)
        return fail(c, fault, len);
    if (len > c->end - c->p)
        return fail(c, TRUNCATED, field - c->start);
    if (data != NULL)
        *data = c->p;
    if (len > 0)
        c->p += len;
    *out_len = len;
    return 1;
}

/* What columns() takes from a record: the header fields are skipped. */
typedef struct {
    int64_t timestamp_delta;
    const uint8_t *key;
    int64_t key_length;   /* -1: null */
    const uint8_t *value;
    int64_t value_length; /* -1: null */
} record_fields;

/* One record, checked; on success c->p is at its end and *f holds its fields. */
static int read_record_fields(cursor *all, Py_ssize_t index, record_fields *f)
{
    const uint8_t *record = all->p;
    int64_t length, delta, ignored, headers;
    if (!read_varint(all, 5, 32, &length))
        return 0;
    if (length < MIN_RECORD_BYTES - 1)
        return fail(all, BAD_RECORD_LENGTH, length);
    if (length > all->end - all->p)
        return fail(all, TRUNCATED, record - all->start);
    cursor r = {all->start, all->p + 1 /* attributes: unused in v2 */, all->p + length, OK, 0};
    int ok = read_varint(&r, 10, 64, &f->timestamp_delta) && read_varint(&r, 5, 32, &delta);
    if (ok && delta != index)
        ok = fail(&r, OFFSET_DELTA, delta);
    ok = ok && skip_field(&r, -1, BAD_FIELD_LENGTH, &f->key_length, &f->key)
        && skip_field(&r, -1, BAD_FIELD_LENGTH, &f->value_length, &f->value)
        && read_varint(&r, 5, 32, &headers);
    if (ok && headers < 0)
        ok = fail(&r, BAD_HEADER_COUNT, headers);
    for (int64_t h = 0; ok && h < headers; h++)
        ok = skip_field(&r, 0, BAD_HEADER_KEY, &ignored, NULL)
            && skip_field(&r, -1, BAD_FIELD_LENGTH, &ignored, NULL);
    if (ok && r.p != r.end)
        ok = fail(&r, LENGTH_MISMATCH, record - all->start);
    if (!ok)
        return fail(all, r.fault, r.value);
    all->p = r.end;
    return 1;
}

/* One record; on success c->p is at its end. */
static int read_record(cursor *all, Py_ssize_t index, int need_keys, int64_t *ts,
                       int64_t *keyless)
{
    record_fields f;
    if (!read_record_fields(all, index, &f))
        return 0;
    *ts = f.timestamp_delta;
    if (need_keys && *keyless < 0 && f.key_length < 0)
        *keyless = index;
    return 1;
}

static PyObject *scan(PyObject *self, PyObject *args)
{
    Py_buffer view;
    Py_ssize_t count, index = 0;
    int need_keys;
    if (!PyArg_ParseTuple(args, "y*np", &view, &count, &need_keys))
        return NULL;
    const uint8_t *start = (const uint8_t *)view.buf;
    cursor c = {start, start, start + view.len, OK, 0};
    int64_t ts = 0, min_ts = 0, max_ts = 0, keyless = -1;

    if (count < 0 || count > view.len / MIN_RECORD_BYTES) {
        fail(&c, COUNT_TOO_LARGE, count);
    } else {
        for (index = 0; index < count; index++) {
            if (!read_record(&c, index, need_keys, &ts, &keyless))
                break;
            if (index == 0 || ts < min_ts) min_ts = ts;
            if (index == 0 || ts > max_ts) max_ts = ts;
        }
        if (c.fault == OK && c.p != c.end)
            fail(&c, TRAILING_BYTES, c.end - c.p);
    }
    PyBuffer_Release(&view);
    return Py_BuildValue("inLLLL", c.fault, index, (long long)c.value, (long long)min_ts,
                         (long long)max_ts, (long long)keyless);
}

/* A column of binary values being filled: Arrow's validity bitmap, int32 offsets, data. */
typedef struct {
    PyObject *validity, *offsets, *data;
    Py_ssize_t nulls;
    int64_t size;
} binary_column;

static int binary_column_new(binary_column *col, Py_ssize_t rows, int64_t size)
{
    col->validity = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
    col->offsets = PyBytes_FromStringAndSize(NULL, (rows + 1) * 4);
    col->data = PyBytes_FromStringAndSize(NULL, size);
    col->nulls = 0;
    col->size = 0;
    if (col->validity == NULL || col->offsets == NULL || col->data == NULL)
        return 0;
    memset(PyBytes_AS_STRING(col->validity), 0, (rows + 7) / 8);
    ((int32_t *)PyBytes_AS_STRING(col->offsets))[0] = 0;
    return 1;
}

static void binary_column_put(binary_column *col, Py_ssize_t row, const uint8_t *bytes,
                              int64_t length)
{
    if (length < 0) {
        col->nulls++;
    } else {
        PyBytes_AS_STRING(col->validity)[row / 8] |= (char)(1 << (row % 8));
        memcpy(PyBytes_AS_STRING(col->data) + col->size, bytes, (size_t)length);
        col->size += length;
    }
    ((int32_t *)PyBytes_AS_STRING(col->offsets))[row + 1] = (int32_t)col->size;
}

static void binary_column_clear(binary_column *col)
{
    Py_CLEAR(col->validity);
    Py_CLEAR(col->offsets);
    Py_CLEAR(col->data);
}

/* One batch handed to columns(). */
typedef struct {
    Py_buffer records;
    Py_ssize_t count;
    long long base_offset, base_timestamp, max_timestamp, low, high;
    int log_append_time;
} batch_part;

static const char *FAULT_NAMES[] = {
    "ok", "truncated", "varint too long", "bad record length", "length mismatch",
    "offset delta", "bad field length", "bad header count", "bad header key",
    "trailing bytes", "count too large",
};

/* Pass 1 of columns(): every record of every part checked, the wanted ones' fields kept. */
static int collect(batch_part *parts, Py_ssize_t nparts, record_fields *kept, int64_t *offsets,
                   int64_t *timestamps, int32_t *types, Py_ssize_t *rows, int64_t *key_bytes,
                   int64_t *value_bytes)
{
    *rows = 0;
    *key_bytes = *value_bytes = 0;
    for (Py_ssize_t i = 0; i < nparts; i++) {
        batch_part *b = &parts[i];
        const uint8_t *start = (const uint8_t *)b->records.buf;
        cursor c = {start, start, start + b->records.len, OK, 0};
        Py_ssize_t index;
        for (index = 0; index < b->count; index++) {
            record_fields f;
            if (!read_record_fields(&c, index, &f))
                break;
            int64_t offset = (int64_t)b->base_offset + index;
            if (offset < b->low || offset >= b->high)
                continue;
            kept[*rows] = f;
            offsets[*rows] = offset;
            timestamps[*rows] = b->log_append_time
                ? (int64_t)b->max_timestamp
                : (int64_t)((uint64_t)b->base_timestamp + (uint64_t)f.timestamp_delta);
            types[*rows] = b->log_append_time ? 1 : 0;
            *key_bytes += f.key_length > 0 ? f.key_length : 0;
            *value_bytes += f.value_length > 0 ? f.value_length : 0;
            (*rows)++;
        }
        if (c.fault == OK && c.p != c.end)
            fail(&c, TRAILING_BYTES, c.end - c.p);
        if (c.fault != OK) {
            PyErr_Format(PyExc_ValueError,
                         "records of the batch at offset %lld: %s (record %zd, value %lld)",
                         b->base_offset, FAULT_NAMES[c.fault], index, (long long)c.value);
            return 0;
        }
    }
    if (*key_bytes > INT32_MAX || *value_bytes > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "more than 2 GiB of keys or values in one call");
        return 0;
    }
    return 1;
}

static PyObject *columns(PyObject *self, PyObject *args)
{
    PyObject *list, *result = NULL;
    if (!PyArg_ParseTuple(args, "O!", &PyList_Type, &list))
        return NULL;
    Py_ssize_t nparts = PyList_GET_SIZE(list), parsed = 0, total = 0, rows = 0;
    batch_part *parts = PyMem_Calloc(nparts > 0 ? nparts : 1, sizeof(batch_part));
    record_fields *kept = NULL;
    PyObject *offsets = NULL, *timestamps = NULL, *types = NULL;
    binary_column keys = {0}, values = {0};
    if (parts == NULL)
        return PyErr_NoMemory();
    for (; parsed < nparts; parsed++) {
        batch_part *b = &parts[parsed];
        if (!PyArg_ParseTuple(PyList_GET_ITEM(list, parsed), "y*nLLLpLL", &b->records,
                              &b->count, &b->base_offset, &b->base_timestamp,
                              &b->max_timestamp, &b->log_append_time, &b->low, &b->high))
            goto done;
        if (b->count < 0 || b->count > b->records.len / MIN_RECORD_BYTES) {
            PyErr_Format(PyExc_ValueError, "records of the batch at offset %lld: %s",
                         b->base_offset, FAULT_NAMES[COUNT_TOO_LARGE]);
            parsed++;
            goto done;
        }
        total += b->count;
    }
    kept = PyMem_Malloc((total > 0 ? total : 1) * sizeof(record_fields));
    offsets = PyBytes_FromStringAndSize(NULL, total * 8);
    timestamps = PyBytes_FromStringAndSize(NULL, total * 8);
    types = PyBytes_FromStringAndSize(NULL, total * 4);
    if (kept == NULL || offsets == NULL || timestamps == NULL || types == NULL) {
        if (kept == NULL)
            PyErr_NoMemory();
        goto done;
    }
    int64_t key_bytes, value_bytes;
    if (!collect(parts, nparts, kept, (int64_t *)PyBytes_AS_STRING(offsets),
                 (int64_t *)PyBytes_AS_STRING(timestamps), (int32_t *)PyBytes_AS_STRING(types),
                 &rows, &key_bytes, &value_bytes))
        goto done;
    if (!binary_column_new(&keys, rows, key_bytes) || !binary_column_new(&values, rows, value_bytes))
        goto done;
    for (Py_ssize_t row = 0; row < rows; row++) {
        binary_column_put(&keys, row, kept[row].key, kept[row].key_length);
        binary_column_put(&values, row, kept[row].value, kept[row].value_length);
    }
    result = Py_BuildValue("nOOOOnOOOnOO", rows, offsets, timestamps, types, keys.validity,
                           keys.nulls, keys.offsets, keys.data, values.validity, values.nulls,
                           values.offsets, values.data);
done:
    for (Py_ssize_t i = 0; i < parsed; i++)
        PyBuffer_Release(&parts[i].records);
    PyMem_Free(parts);
    PyMem_Free(kept);
    Py_XDECREF(offsets);
    Py_XDECREF(timestamps);
    Py_XDECREF(types);
    binary_column_clear(&keys);
    binary_column_clear(&values);
    return result;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Check the records of a v2 batch; see record_scan.py."},
    {"columns", columns, METH_VARARGS,
     "Arrow buffers of the records of v2 batches; see oncelog.spark.record_columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_record_scan", "Native record scanner.", -1, methods,
};

PyMODINIT_FUNC PyInit__record_scan(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "SCANNER_ABI", SCANNER_ABI) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
