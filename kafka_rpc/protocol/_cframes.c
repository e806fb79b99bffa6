/*
 * kafka_rpc.protocol._cframes: the native per-frame path of the server (framing and request
 * headers), with exactly the semantics of the pure-Python reference in frames.py
 * (``scan_frames_py`` / ``response_frame_py``; tests/protocol/test_frames.py runs both).
 *
 * Hand-written and generic: it knows Kafka's framing and request header v1/v2, not any API.
 *
 * scan_frames(buf, pos, max_bytes, max_frames, flex, ctx_type, listener)
 *     -> (frames, new_pos, error)
 *   Walks the complete frames of ``buf`` from ``pos``: int32 big-endian size (negative or above
 *   ``max_bytes`` is an error), then the request header. ``flex`` is a tuple indexed by api key:
 *   the first flexible request version (header v2 from there on) or None for an unknown key.
 *   Each frame becomes a ``ctx_type`` (tuple or a tuple subclass) of
 *   ``(api_key, api_version, correlation_id, client_id, listener, frame, body_pos)``:
 *   ``frame`` is ``buf`` itself when the frame is all of it, else a copy of the frame (so a body
 *   reader can never run into the next frame); ``body_pos`` indexes ``frame``. A null client id
 *   becomes "". At most ``max_frames`` frames are taken. ``new_pos`` is where the first frame
 *   not taken starts (incomplete, beyond max_frames, or bad). ``error`` is None or the reason
 *   the connection must close at ``new_pos`` (bad size, unknown api key, malformed header); the
 *   frames before it are still returned, as Kafka answers them before it closes.
 *
 * response_frame(correlation_id, header_v1, body) -> bytes
 *   int32 size + int32 correlation id + (an empty tagged section when header_v1) + body.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t
be32(const unsigned char *s)
{
    return ((uint32_t)s[0] << 24) | ((uint32_t)s[1] << 16) | ((uint32_t)s[2] << 8) | s[3];
}

static inline int16_t
be16s(const unsigned char *s)
{
    return (int16_t)(uint16_t)((s[0] << 8) | s[1]);
}

/* Unsigned varint of at most 5 bytes within [*p, end) (Kafka's readUnsignedVarint, as a Java
 * int). Returns NULL on success, else the reason. */
static const char *
uvarint(const unsigned char *b, Py_ssize_t *p, Py_ssize_t end, int32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < 5; i++) {
        if (*p >= end)
            return "truncated header tagged fields";
        unsigned char c = b[(*p)++];
        v |= (uint32_t)(c & 0x7F) << (7 * i);
        if (c < 0x80) {
            *out = (int32_t)v;
            return NULL;
        }
    }
    return "varint in the header tagged fields is longer than 5 bytes";
}

/* Parse the request header of the frame payload b[start, end). Returns NULL and fills the
 * outputs, or the reason the header is malformed. */
static const char *
parse_header(const unsigned char *b, Py_ssize_t start, Py_ssize_t end, PyObject *flex,
             int *api_key, int *version, int32_t *corr, Py_ssize_t *cid_pos,
             Py_ssize_t *cid_len, Py_ssize_t *body_pos, int *unknown)
{
    if (end - start < 10)
        return "truncated request header";
    *api_key = be16s(b + start);
    *version = be16s(b + start + 2);
    *corr = (int32_t)be32(b + start + 4);
    int16_t n = be16s(b + start + 8);
    PyObject *f = NULL;
    if (*api_key >= 0 && *api_key < PyTuple_GET_SIZE(flex))
        f = PyTuple_GET_ITEM(flex, *api_key);
    if (f == NULL || f == Py_None) {
        *unknown = 1;
        return "unknown api key";
    }
    long flex_from = PyLong_AsLong(f);
    if (flex_from == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return "bad flexible-version table";
    }
    Py_ssize_t p = start + 10;
    if (n < 0) {
        if (n != -1)
            return "negative client id length";
        *cid_pos = -1;
        *cid_len = 0;
    }
    else {
        if (p + n > end)
            return "client id runs past the end of the frame";
        *cid_pos = p;
        *cid_len = n;
        p += n;
    }
    if (*version >= flex_from) {
        if (p < end && b[p] == 0) {
            p += 1;
        }
        else {
            int32_t count;
            const char *why = uvarint(b, &p, end, &count);
            if (why)
                return why;
            if (count < 0)
                return "negative tagged field count";
            for (int32_t i = 0; i < count; i++) {
                int32_t tag, size;
                if ((why = uvarint(b, &p, end, &tag)) || (why = uvarint(b, &p, end, &size)))
                    return why;
                if (tag < 0 || size < 0)
                    return "negative tag or tagged-field size";
                if (p + size > end)
                    return "tagged field runs past the end of the frame";
                p += size;
            }
        }
    }
    *body_pos = p;
    return NULL;
}

static PyObject *
scan_frames(PyObject *self, PyObject *args)
{
    PyObject *bufobj, *flex, *listener;
    PyTypeObject *ctx_type;
    Py_ssize_t pos, max_bytes, max_frames;
    if (!PyArg_ParseTuple(args, "OnnnO!O!O:scan_frames", &bufobj, &pos, &max_bytes, &max_frames,
                          &PyTuple_Type, &flex, &PyType_Type, &ctx_type, &listener))
        return NULL;
    if (!PyType_IsSubtype(ctx_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "ctx_type must be tuple or a tuple subclass");
        return NULL;
    }
    if (!PyBytes_Check(bufobj)) {
        PyErr_SetString(PyExc_TypeError, "scan_frames expects bytes");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(bufobj);
    Py_ssize_t n = PyBytes_GET_SIZE(bufobj);
    if (pos < 0 || pos > n) {
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
        return NULL;
    }
    PyObject *frames = PyList_New(0);
    if (frames == NULL)
        return NULL;
    PyObject *error = NULL; /* new reference when set */
    /* client ids repeat on a connection: reuse the last decoded one */
    PyObject *last_cid = NULL;
    const unsigned char *last_cid_b = NULL;
    Py_ssize_t last_cid_len = -1;

    while (n - pos >= 4 && PyList_GET_SIZE(frames) < max_frames) {
        int32_t size = (int32_t)be32(b + pos);
        if (size < 0 || size > max_bytes) {
            error = PyUnicode_FromFormat("frame size %d outside [0, %zd]", (int)size, max_bytes);
            break;
        }
        Py_ssize_t end = pos + 4 + (Py_ssize_t)size;
        if (end > n)
            break;
        int api_key, version, unknown = 0;
        int32_t corr;
        Py_ssize_t cid_pos, cid_len, body_pos;
        const char *why = parse_header(b, pos + 4, end, flex, &api_key, &version, &corr,
                                       &cid_pos, &cid_len, &body_pos, &unknown);
        if (why) {
            if (unknown)
                error = PyUnicode_FromFormat("bad request header: unknown api key %d", api_key);
            else
                error = PyUnicode_FromFormat("bad request header: %s", why);
            break;
        }
        PyObject *cid;
        if (cid_pos < 0 || cid_len == 0) {
            cid = PyUnicode_New(0, 0);
        }
        else if (last_cid != NULL && cid_len == last_cid_len &&
                 memcmp(b + cid_pos, last_cid_b, cid_len) == 0) {
            cid = Py_NewRef(last_cid);
        }
        else {
            cid = PyUnicode_DecodeUTF8((const char *)b + cid_pos, cid_len, NULL);
            if (cid == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                    goto fail;
                PyErr_Clear();
                error = PyUnicode_FromString("bad request header: client id is not valid UTF-8");
                break;
            }
            Py_XSETREF(last_cid, Py_NewRef(cid));
            last_cid_b = b + cid_pos;
            last_cid_len = cid_len;
        }
        if (cid == NULL)
            goto fail;
        PyObject *frame;
        Py_ssize_t fbody;
        if (pos == 0 && end == n) {
            frame = Py_NewRef(bufobj);
            fbody = body_pos;
        }
        else {
            frame = PyBytes_FromStringAndSize((const char *)b + pos, end - pos);
            fbody = body_pos - pos;
        }
        if (frame == NULL) {
            Py_DECREF(cid);
            goto fail;
        }
        PyObject *items[7] = {PyLong_FromLong(api_key), PyLong_FromLong(version),
                              PyLong_FromLong(corr), cid, Py_NewRef(listener), frame,
                              PyLong_FromSsize_t(fbody)};
        PyObject *t = NULL;
        if (items[0] && items[1] && items[2] && items[6])
            t = ctx_type == &PyTuple_Type ? PyTuple_New(7) : ctx_type->tp_alloc(ctx_type, 7);
        if (t == NULL) {
            for (int i = 0; i < 7; i++)
                Py_XDECREF(items[i]);
            goto fail;
        }
        for (int i = 0; i < 7; i++)
            PyTuple_SET_ITEM(t, i, items[i]);
        int r = PyList_Append(frames, t);
        Py_DECREF(t);
        if (r < 0)
            goto fail;
        pos = end;
    }
    if (error == NULL && PyErr_Occurred())
        goto fail;
    Py_XDECREF(last_cid);
    if (error == NULL)
        error = Py_NewRef(Py_None);
    return Py_BuildValue("(NnN)", frames, pos, error);
fail:
    Py_XDECREF(last_cid);
    Py_XDECREF(error);
    Py_DECREF(frames);
    return NULL;
}

static PyObject *
response_frame(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "response_frame(correlation_id, header_v1, body)");
        return NULL;
    }
    long corr = PyLong_AsLong(args[0]);
    if (corr == -1 && PyErr_Occurred())
        return NULL;
    if (corr < INT32_MIN || corr > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "correlation id outside int32");
        return NULL;
    }
    int v1 = PyObject_IsTrue(args[1]);
    if (v1 < 0)
        return NULL;
    Py_buffer body;
    if (PyObject_GetBuffer(args[2], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    Py_ssize_t payload = 4 + v1 + body.len;
    if (payload > INT32_MAX) {
        PyBuffer_Release(&body);
        PyErr_SetString(PyExc_OverflowError, "response larger than a frame can say");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 + payload);
    if (out != NULL) {
        unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
        uint32_t s = (uint32_t)payload, c = (uint32_t)(int32_t)corr;
        o[0] = s >> 24, o[1] = s >> 16, o[2] = s >> 8, o[3] = s;
        o[4] = c >> 24, o[5] = c >> 16, o[6] = c >> 8, o[7] = c;
        if (v1)
            o[8] = 0;
        memcpy(o + 8 + v1, body.buf, body.len);
    }
    PyBuffer_Release(&body);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_frames", scan_frames, METH_VARARGS,
     "scan_frames(buf, pos, max_bytes, max_frames, flex, ctx_type, listener) -> (frames, new_pos, error)"},
    {"response_frame", (PyCFunction)(void (*)(void))response_frame, METH_FASTCALL,
     "response_frame(correlation_id, header_v1, body) -> bytes"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_cframes",
    "Native framing and request-header parsing for kafka_rpc's server (see frames.py).", -1,
    methods,
};

PyMODINIT_FUNC
PyInit__cframes(void)
{
    return PyModule_Create(&moduledef);
}
