/*
 * kafka_rpc.protocol._crecords: the records section of a RecordBatch v2 (uncompressed), with
 * exactly the semantics of the pure-Python reference in record_batch.py (``_records_py`` /
 * ``_decode_records_py``; tests/protocol/test_record_batch.py runs both on the same inputs).
 *
 * Hand-written and generic: Kafka's record format (DefaultRecord), nothing of any API.
 *
 * init(error_type)
 *   The exception type raised for a malformed records section (CorruptRecordError).
 *
 * encode_records(keys, values) -> bytes
 *   ``keys``: None (every key null) or a sequence as long as ``values``; each key and value is
 *   None or a bytes-like object. Record i: length (zigzag varint), attributes 0, timestamp
 *   delta 0, offset delta i, key length (-1 for null) and key, value length (-1 for null) and
 *   value, header count 0.
 *
 * decode_records(data, pos, end, count) -> (keys, values)
 *   Reads ``count`` records from ``data[pos:end]`` (``data`` is bytes) and checks that they fill
 *   it exactly; keys and values are lists of bytes or None (headers are skipped). Raises the
 *   ``init`` type with the reference's message on the first malformed field.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *corrupt_error = NULL;

/* Magnitudes are saturated here: a varint of up to 10 bytes can hold 70 bits, where the Python
 * reference has big integers. Any length this large fails every bound check the same way. */
#define SATURATED ((int64_t)1 << 61)

static int
fail(const char *msg)
{
    PyErr_SetString(corrupt_error ? corrupt_error : PyExc_ValueError, msg);
    return -1;
}

/* Zigzag varint within [*p, end), as ``_read_varint``: at most 10 bytes. */
static inline int
read_varint(const unsigned char *buf, Py_ssize_t *p, Py_ssize_t end, int64_t *out)
{
    Py_ssize_t pos = *p;
    uint64_t v = 0;
    int shift = 0;
    int big = 0;
    for (;;) {
        if (pos >= end)
            return fail("record ends inside a varint");
        unsigned int b = buf[pos++];
        uint64_t bits = b & 0x7F;
        if (shift > 0 && (shift >= 64 || (bits >> (64 - shift)) != 0))
            big = 1; /* bits past the 64th: the reference's integer is larger */
        if (shift < 64)
            v |= bits << shift;
        if (b < 0x80)
            break;
        shift += 7;
        if (shift > 63)
            return fail("varint longer than 10 bytes");
    }
    *p = pos;
    int negative = (int)(v & 1);
    uint64_t mag = v >> 1;
    if (big || mag >= (uint64_t)SATURATED)
        mag = (uint64_t)SATURATED;
    *out = negative ? -(int64_t)mag - 1 : (int64_t)mag;
    return 0;
}

static inline void
put_varint(unsigned char **w, int64_t n)
{
    uint64_t v = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (v >= 0x80) {
        *(*w)++ = (unsigned char)((v & 0x7F) | 0x80);
        v >>= 7;
    }
    *(*w)++ = (unsigned char)v;
}

static inline Py_ssize_t
varint_size(int64_t n)
{
    uint64_t v = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    Py_ssize_t s = 1;
    while (v >= 0x80) {
        v >>= 7;
        s++;
    }
    return s;
}

static PyObject *
py_init(PyObject *self, PyObject *arg)
{
    Py_XDECREF(corrupt_error);
    Py_INCREF(arg);
    corrupt_error = arg;
    Py_RETURN_NONE;
}

static PyObject *
py_encode_records(PyObject *self, PyObject *args)
{
    PyObject *keys_obj, *values_obj;
    if (!PyArg_ParseTuple(args, "OO", &keys_obj, &values_obj))
        return NULL;
    PyObject *values = PySequence_Fast(values_obj, "values must be a sequence");
    if (values == NULL)
        return NULL;
    PyObject *keys = NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(values);
    if (keys_obj != Py_None) {
        keys = PySequence_Fast(keys_obj, "keys must be a sequence");
        if (keys == NULL) {
            Py_DECREF(values);
            return NULL;
        }
        if (PySequence_Fast_GET_SIZE(keys) != n) {
            PyErr_SetString(PyExc_ValueError, "keys and values differ in length");
            Py_DECREF(keys);
            Py_DECREF(values);
            return NULL;
        }
    }
    Py_buffer *bufs = PyMem_Calloc((size_t)(2 * (n ? n : 1)), sizeof(Py_buffer));
    char *have = PyMem_Calloc((size_t)(2 * (n ? n : 1)), 1);
    PyObject *result = NULL;
    if (bufs == NULL || have == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t body = 1 + 1 + varint_size(i) + 1; /* attributes, ts delta, offset, headers */
        for (int j = 0; j < 2; j++) {
            PyObject *o = j == 0 ? (keys ? PySequence_Fast_GET_ITEM(keys, i) : Py_None)
                                 : PySequence_Fast_GET_ITEM(values, i);
            if (o == Py_None) {
                body += 1;
                continue;
            }
            if (PyObject_GetBuffer(o, &bufs[2 * i + j], PyBUF_SIMPLE) < 0)
                goto done;
            have[2 * i + j] = 1;
            body += varint_size(bufs[2 * i + j].len) + bufs[2 * i + j].len;
        }
        total += varint_size(body) + body;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL)
        goto done;
    unsigned char *w = (unsigned char *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t body = 1 + 1 + varint_size(i) + 1;
        for (int j = 0; j < 2; j++)
            body += have[2 * i + j] ? varint_size(bufs[2 * i + j].len) + bufs[2 * i + j].len : 1;
        put_varint(&w, body);
        *w++ = 0; /* attributes */
        *w++ = 0; /* timestamp delta 0 */
        put_varint(&w, i);
        for (int j = 0; j < 2; j++) {
            if (!have[2 * i + j]) {
                *w++ = 1; /* length -1: null */
                continue;
            }
            put_varint(&w, bufs[2 * i + j].len);
            memcpy(w, bufs[2 * i + j].buf, (size_t)bufs[2 * i + j].len);
            w += bufs[2 * i + j].len;
        }
        *w++ = 0; /* no headers */
    }
done:
    if (bufs != NULL && have != NULL)
        for (Py_ssize_t k = 0; k < 2 * n; k++)
            if (have[k])
                PyBuffer_Release(&bufs[k]);
    PyMem_Free(bufs);
    PyMem_Free(have);
    Py_XDECREF(keys);
    Py_DECREF(values);
    return result;
}

/* One key or value: its length varint, then None (negative length) or a bytes copy. */
static int
read_field(const unsigned char *buf, Py_ssize_t *p, Py_ssize_t rend,
           PyObject *list, const char *msg)
{
    int64_t len;
    if (read_varint(buf, p, rend, &len) < 0)
        return -1;
    PyObject *item;
    if (len >= 0) {
        if (*p + len > rend)
            return fail(msg);
        item = PyBytes_FromStringAndSize((const char *)buf + *p, (Py_ssize_t)len);
        if (item == NULL)
            return -1;
        *p += (Py_ssize_t)len;
    } else {
        item = Py_None;
        Py_INCREF(item);
    }
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *
py_decode_records(PyObject *self, PyObject *args)
{
    PyObject *data;
    Py_ssize_t p, end, count;
    if (!PyArg_ParseTuple(args, "O!nnn", &PyBytes_Type, &data, &p, &end, &count))
        return NULL;
    if (p < 0 || end > PyBytes_GET_SIZE(data) || p > end) {
        PyErr_SetString(PyExc_ValueError, "positions out of range");
        return NULL;
    }
    const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
    PyObject *keys = PyList_New(0), *values = PyList_New(0);
    if (keys == NULL || values == NULL)
        goto error;
    for (Py_ssize_t r = 0; r < count; r++) {
        int64_t rlen, ignored;
        if (read_varint(buf, &p, end, &rlen) < 0)
            goto error;
        if (rlen < 1 || p + rlen > end) {
            fail("record length does not fit in its batch");
            goto error;
        }
        Py_ssize_t rend = p + (Py_ssize_t)rlen;
        p += 1; /* attributes */
        if (p + 2 < rend && buf[p] < 0x80 && buf[p + 1] < 0x80) {
            p += 2; /* timestamp delta and offset delta, one byte each */
        } else {
            if (read_varint(buf, &p, rend, &ignored) < 0 ||
                read_varint(buf, &p, rend, &ignored) < 0)
                goto error;
        }
        if (p < rend && buf[p] == 1) { /* key length -1: a null key */
            p += 1;
            if (PyList_Append(keys, Py_None) < 0)
                goto error;
        } else if (read_field(buf, &p, rend, keys, "record key does not fit") < 0) {
            goto error;
        }
        if (read_field(buf, &p, rend, values, "record value does not fit") < 0)
            goto error;
        if (p < rend && buf[p] == 0) {
            p += 1; /* no headers */
        } else {
            int64_t nh, h;
            if (read_varint(buf, &p, rend, &nh) < 0)
                goto error;
            for (int64_t i = 0; i < nh; i++) {
                if (read_varint(buf, &p, rend, &h) < 0)
                    goto error;
                if (h > 0)
                    p += (Py_ssize_t)h;
                if (read_varint(buf, &p, rend, &h) < 0)
                    goto error;
                if (h > 0)
                    p += (Py_ssize_t)h;
            }
        }
        if (p != rend) {
            fail("record length does not match its fields");
            goto error;
        }
    }
    if (p != end) {
        fail("batch length does not match its records");
        goto error;
    }
    PyObject *res = PyTuple_Pack(2, keys, values);
    Py_DECREF(keys);
    Py_DECREF(values);
    return res;
error:
    Py_XDECREF(keys);
    Py_XDECREF(values);
    return NULL;
}

static PyMethodDef methods[] = {
    {"init", py_init, METH_O, "init(error_type): the type raised for malformed records"},
    {"encode_records", py_encode_records, METH_VARARGS,
     "encode_records(keys, values) -> bytes: the records section of a batch"},
    {"decode_records", py_decode_records, METH_VARARGS,
     "decode_records(data, pos, end, count) -> (keys, values)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_crecords", "RecordBatch v2 records section (native)", -1, methods,
};

PyMODINIT_FUNC
PyInit__crecords(void)
{
    return PyModule_Create(&module);
}
