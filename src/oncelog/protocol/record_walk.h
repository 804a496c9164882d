/*
 * The walk over the records of a v2 batch (after decompression) that both native
 * extensions share: oncelog.protocol._record_scan checks produced records with it,
 * oncelog.spark._columns decodes fetched ones into Arrow buffers. Every field is
 * bounds-checked; the rules are documented once, in oncelog/protocol/record_scan.py.
 */
#ifndef ONCELOG_RECORD_WALK_H
#define ONCELOG_RECORD_WALK_H

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
    OFFSET_DELTA = 5,       /* produce: record i's delta is not i; fetch: not growing, or
                               past the batch's last offset delta */
    BAD_FIELD_LENGTH = 6,   /* key, value or header value length below -1 */
    BAD_HEADER_COUNT = 7,   /* negative number of headers */
    BAD_HEADER_KEY = 8,     /* header key length below 0 (null header keys are invalid) */
    TRAILING_BYTES = 9,     /* bytes left after the declared number of records */
    COUNT_TOO_LARGE = 10,   /* more records declared than the bytes could hold */
};

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
    int64_t offset_delta;
    const uint8_t *key;
    int64_t key_length;   /* -1: null */
    const uint8_t *value;
    int64_t value_length; /* -1: null */
} record_fields;

/* One record, checked; on success c->p is at its end and *f holds its fields. Its offset
 * delta must lie in [lowest_delta, highest_delta]: exactly its index in a produced batch,
 * only above the last one and within the batch's last offset delta in a stored batch the
 * log cleaner rewrote (compaction keeps the offsets of the records it retains). */
static int read_record_fields(cursor *all, int64_t lowest_delta, int64_t highest_delta,
                              record_fields *f)
{
    const uint8_t *record = all->p;
    int64_t length, delta = 0, ignored, headers;
    if (!read_varint(all, 5, 32, &length))
        return 0;
    if (length < MIN_RECORD_BYTES - 1)
        return fail(all, BAD_RECORD_LENGTH, length);
    if (length > all->end - all->p)
        return fail(all, TRUNCATED, record - all->start);
    cursor r = {all->start, all->p + 1 /* attributes: unused in v2 */, all->p + length, OK, 0};
    int ok = read_varint(&r, 10, 64, &f->timestamp_delta) && read_varint(&r, 5, 32, &delta);
    if (ok && (delta < lowest_delta || delta > highest_delta))
        ok = fail(&r, OFFSET_DELTA, delta);
    f->offset_delta = delta;
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

#endif
