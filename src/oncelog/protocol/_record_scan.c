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
 * The walk itself is in record_walk.h, shared with oncelog.spark._columns.
 */
#include "record_walk.h"

#define SCANNER_ABI 1

/* One record; on success c->p is at its end. */
static int read_record(cursor *all, Py_ssize_t index, int need_keys, int64_t *ts,
                       int64_t *keyless)
{
    record_fields f;
    if (!read_record_fields(all, index, index, &f))
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
