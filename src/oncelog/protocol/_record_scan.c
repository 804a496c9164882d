/*
 * The record scanner of oncelog.protocol.record_scan, in C: one pass over the records of
 * a v2 batch (after decompression), checking their structure without building any Python
 * object per record. The pure-Python scanner in record_scan.py is the reference: both
 * return the same tuple for every input (a hypothesis test compares them), so the rules
 * are documented there, once.
 *
 * scan(records, count, need_keys) ->
 *     (fault, index, value, min_timestamp_delta, max_timestamp_delta, first_keyless)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

#define SCANNER_ABI 1
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

/* Skip a length-prefixed field whose length may not be below min_len (else `fault`). */
static int skip_field(cursor *c, int64_t min_len, int fault, int64_t *out_len)
{
    const uint8_t *field = c->p;
    int64_t len;
    if (!read_varint(c, 5, 32, &len))
        return 0;
    if (len < min_len)
        return fail(c, fault, len);
    if (len > c->end - c->p)
        return fail(c, TRUNCATED, field - c->start);
    if (len > 0)
        c->p += len;
    *out_len = len;
    return 1;
}

/* One record; on success c->p is at its end. */
static int read_record(cursor *all, Py_ssize_t index, int need_keys, int64_t *ts,
                       int64_t *keyless)
{
    const uint8_t *record = all->p;
    int64_t length, delta, key_length, ignored, headers;
    if (!read_varint(all, 5, 32, &length))
        return 0;
    if (length < MIN_RECORD_BYTES - 1)
        return fail(all, BAD_RECORD_LENGTH, length);
    if (length > all->end - all->p)
        return fail(all, TRUNCATED, record - all->start);
    cursor r = {all->start, all->p + 1 /* attributes: unused in v2 */, all->p + length, OK, 0};
    int ok = read_varint(&r, 10, 64, ts) && read_varint(&r, 5, 32, &delta);
    if (ok && delta != index)
        ok = fail(&r, OFFSET_DELTA, delta);
    ok = ok && skip_field(&r, -1, BAD_FIELD_LENGTH, &key_length)
        && skip_field(&r, -1, BAD_FIELD_LENGTH, &ignored) && read_varint(&r, 5, 32, &headers);
    if (ok && headers < 0)
        ok = fail(&r, BAD_HEADER_COUNT, headers);
    for (int64_t h = 0; ok && h < headers; h++)
        ok = skip_field(&r, 0, BAD_HEADER_KEY, &ignored)
            && skip_field(&r, -1, BAD_FIELD_LENGTH, &ignored);
    if (ok && r.p != r.end)
        ok = fail(&r, LENGTH_MISMATCH, record - all->start);
    if (!ok)
        return fail(all, r.fault, r.value);
    if (need_keys && *keyless < 0 && key_length < 0)
        *keyless = index;
    all->p = r.end;
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

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS, "Check the records of a v2 batch; see record_scan.py."},
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
