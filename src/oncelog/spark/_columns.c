/*
 * The Spark reader's native decoder (oncelog.spark.record_columns documents it):
 *
 * columns([(records, count, base_offset, last_offset_delta, base_timestamp, max_timestamp,
 *           log_append_time, low, high), ...]) ->
 *     (rows, offsets, timestamps, timestamp_types, key_validity, key_nulls, key_offsets,
 *      key_data, value_validity, value_nulls, value_offsets, value_data)
 *
 * walks the records of several v2 batches (after decompression), each checked as the
 * broker's produce path checks them (record_walk.h), and copies those with offsets in
 * [low, high) into Arrow buffers; ValueError on a fault. Its own extension, not part of
 * oncelog.protocol._record_scan: importing anything under oncelog.protocol imports kio's
 * types, which Spark's Python workers are kept free of (tests/spark/test_spark_worker_imports.py).
 */
#include "../protocol/record_walk.h"

/* Bumped with every change of columns()' arguments or answer, in step with
 * record_columns.py: a stale build is then not used (the reader reads through librdkafka). */
#define COLUMNS_ABI 2

#include <string.h>

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
    long long base_offset, last_offset_delta, base_timestamp, max_timestamp, low, high;
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
        int64_t next_delta = 0; /* deltas only grow (with gaps where compaction removed) */
        for (index = 0; index < b->count; index++) {
            record_fields f;
            if (!read_record_fields(&c, next_delta, b->last_offset_delta, &f))
                break;
            next_delta = f.offset_delta + 1;
            int64_t offset = (int64_t)b->base_offset + f.offset_delta;
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
        if (!PyArg_ParseTuple(PyList_GET_ITEM(list, parsed), "y*nLLLLpLL", &b->records,
                              &b->count, &b->base_offset, &b->last_offset_delta,
                              &b->base_timestamp,
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
    {"columns", columns, METH_VARARGS,
     "Arrow buffers of the records of v2 batches; see oncelog.spark.record_columns."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns", "The Spark reader's native record decoder.", -1, methods,
};

PyMODINIT_FUNC PyInit__columns(void)
{
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "COLUMNS_ABI", COLUMNS_ABI) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
