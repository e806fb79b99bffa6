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
 * dispatch(buf, pos, max_bytes, max_frames, flex, ctx_type, listener, table, out, metrics)
 *     -> (new_pos, stop, error)
 *   scan_frames that also serves each frame whose API has a synchronous handler, in order:
 *   ``table`` is a tuple indexed by api key of None or
 *   ``(min_version, max_version, readers, handler, resp_header_flex, writers)`` (readers and
 *   writers are tuples indexed by ``version - min_version``). For each frame: ``request =
 *   readers[..](frame, body_pos)[0]``, ``result = handler(ctx, request)``, then the response
 *   frame (``result`` framed as by response_frame when it is bytes, else written by
 *   ``writers[..](result, bytearray_with_header)``) is appended to the list ``out``; with
 *   ``metrics`` not None, ``metrics.observe(api_key, version, seconds, False)`` follows. The walk
 *   stops after the first frame it cannot finish, returned as ``stop = (kind, ctx, request, exc)``:
 *   kind 0, no table entry or a version out of its range (nothing run; the caller serves it);
 *   kind 1, the reader raised ``exc``; kind 2, the handler or the writer raised ``exc`` (its
 *   error response is the caller's). ``stop`` is None when the walk ended otherwise; ``new_pos``
 *   and ``error`` are as in scan_frames (``max_frames`` counts the stop frame too). Exceptions
 *   that are not ``Exception`` subclasses propagate. Pure-Python reference: frames.dispatch_py.
 *
 * response_frame(correlation_id, header_v1, body) -> bytes
 *   int32 size + int32 correlation id + (an empty tagged section when header_v1) + body.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

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

/* The walk over a buffer's frames, shared by scan_frames and dispatch. */
typedef struct {
    PyObject *bufobj;
    const unsigned char *b;
    Py_ssize_t n, pos, max_bytes;
    PyObject *flex, *listener;
    PyTypeObject *ctx_type;
    /* client ids repeat on a connection: reuse the last decoded one */
    PyObject *last_cid;
    const unsigned char *last_cid_b;
    Py_ssize_t last_cid_len;
} walk_t;

/* One parsed frame, besides its ctx tuple. */
typedef struct {
    int api_key, version;
    int32_t corr;
    PyObject *frame; /* borrowed from the ctx */
    Py_ssize_t body_pos;
} frame_t;

/* Take the next complete frame at w->pos. Returns 1 with *ctx (new reference) and *fi filled,
 * w->pos moved past the frame; 0 when no complete frame is left; 2 with *error (new reference)
 * when the connection must close at w->pos; -1 with a Python exception set. */
static int
take_frame(walk_t *w, PyObject **ctx, frame_t *fi, PyObject **error)
{
    const unsigned char *b = w->b;
    Py_ssize_t pos = w->pos, n = w->n;
    if (n - pos < 4)
        return 0;
    int32_t size = (int32_t)be32(b + pos);
    if (size < 0 || size > w->max_bytes) {
        *error = PyUnicode_FromFormat("frame size %d outside [0, %zd]", (int)size, w->max_bytes);
        return *error ? 2 : -1;
    }
    Py_ssize_t end = pos + 4 + (Py_ssize_t)size;
    if (end > n)
        return 0;
    int api_key, version, unknown = 0;
    int32_t corr;
    Py_ssize_t cid_pos, cid_len, body_pos;
    const char *why = parse_header(b, pos + 4, end, w->flex, &api_key, &version, &corr,
                                   &cid_pos, &cid_len, &body_pos, &unknown);
    if (why) {
        if (unknown)
            *error = PyUnicode_FromFormat("bad request header: unknown api key %d", api_key);
        else
            *error = PyUnicode_FromFormat("bad request header: %s", why);
        return *error ? 2 : -1;
    }
    PyObject *cid;
    if (cid_pos < 0 || cid_len == 0) {
        cid = PyUnicode_New(0, 0);
    }
    else if (w->last_cid != NULL && cid_len == w->last_cid_len &&
             memcmp(b + cid_pos, w->last_cid_b, cid_len) == 0) {
        cid = Py_NewRef(w->last_cid);
    }
    else {
        cid = PyUnicode_DecodeUTF8((const char *)b + cid_pos, cid_len, NULL);
        if (cid == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                return -1;
            PyErr_Clear();
            *error = PyUnicode_FromString("bad request header: client id is not valid UTF-8");
            return *error ? 2 : -1;
        }
        Py_XSETREF(w->last_cid, Py_NewRef(cid));
        w->last_cid_b = b + cid_pos;
        w->last_cid_len = cid_len;
    }
    if (cid == NULL)
        return -1;
    PyObject *frame;
    Py_ssize_t fbody;
    if (pos == 0 && end == n) {
        frame = Py_NewRef(w->bufobj);
        fbody = body_pos;
    }
    else {
        frame = PyBytes_FromStringAndSize((const char *)b + pos, end - pos);
        fbody = body_pos - pos;
    }
    if (frame == NULL) {
        Py_DECREF(cid);
        return -1;
    }
    PyObject *items[7] = {PyLong_FromLong(api_key), PyLong_FromLong(version),
                          PyLong_FromLong(corr), cid, Py_NewRef(w->listener), frame,
                          PyLong_FromSsize_t(fbody)};
    PyTypeObject *ctx_type = w->ctx_type;
    PyObject *t = NULL;
    if (items[0] && items[1] && items[2] && items[6])
        t = ctx_type == &PyTuple_Type ? PyTuple_New(7) : ctx_type->tp_alloc(ctx_type, 7);
    if (t == NULL) {
        for (int i = 0; i < 7; i++)
            Py_XDECREF(items[i]);
        return -1;
    }
    for (int i = 0; i < 7; i++)
        PyTuple_SET_ITEM(t, i, items[i]);
    *ctx = t;
    fi->api_key = api_key;
    fi->version = version;
    fi->corr = corr;
    fi->frame = frame;
    fi->body_pos = fbody;
    w->pos = end;
    return 1;
}

/* Parse the arguments common to scan_frames and dispatch (the first seven). */
static int
walk_init(walk_t *w, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, const char *fn,
          Py_ssize_t *max_frames)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "%s() takes %zd arguments (%zd given)", fn, want, nargs);
        return -1;
    }
    memset(w, 0, sizeof(*w));
    w->bufobj = args[0];
    if (!PyBytes_Check(w->bufobj)) {
        PyErr_Format(PyExc_TypeError, "%s expects bytes", fn);
        return -1;
    }
    w->pos = PyLong_AsSsize_t(args[1]);
    w->max_bytes = PyLong_AsSsize_t(args[2]);
    *max_frames = PyLong_AsSsize_t(args[3]);
    if (PyErr_Occurred())
        return -1;
    w->flex = args[4];
    if (!PyTuple_Check(w->flex)) {
        PyErr_SetString(PyExc_TypeError, "flex must be a tuple");
        return -1;
    }
    if (!PyType_Check(args[5]) || !PyType_IsSubtype((PyTypeObject *)args[5], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "ctx_type must be tuple or a tuple subclass");
        return -1;
    }
    w->ctx_type = (PyTypeObject *)args[5];
    w->listener = args[6];
    w->b = (const unsigned char *)PyBytes_AS_STRING(w->bufobj);
    w->n = PyBytes_GET_SIZE(w->bufobj);
    if (w->pos < 0 || w->pos > w->n) {
        PyErr_SetString(PyExc_ValueError, "pos outside the buffer");
        return -1;
    }
    return 0;
}

static PyObject *
scan_frames(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    walk_t w;
    Py_ssize_t max_frames;
    if (walk_init(&w, args, nargs, 7, "scan_frames", &max_frames) < 0)
        return NULL;
    PyObject *frames = PyList_New(0);
    if (frames == NULL)
        return NULL;
    PyObject *error = NULL; /* new reference when set */
    while (PyList_GET_SIZE(frames) < max_frames) {
        PyObject *ctx;
        frame_t fi;
        int r = take_frame(&w, &ctx, &fi, &error);
        if (r < 0)
            goto fail;
        if (r != 1)
            break;
        r = PyList_Append(frames, ctx);
        Py_DECREF(ctx);
        if (r < 0)
            goto fail;
    }
    Py_XDECREF(w.last_cid);
    if (error == NULL)
        error = Py_NewRef(Py_None);
    return Py_BuildValue("(NnN)", frames, w.pos, error);
fail:
    Py_XDECREF(w.last_cid);
    Py_XDECREF(error);
    Py_DECREF(frames);
    return NULL;
}

/* The raised exception as an object (traceback attached), the error indicator cleared. */
static PyObject *
take_exception(void)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

/* A stop: (kind, ctx, request, exception); steals the references passed in. */
static PyObject *
make_stop(int kind, PyObject *ctx, PyObject *request, PyObject *exc)
{
    PyObject *t = PyTuple_New(4);
    PyObject *k = PyLong_FromLong(kind);
    if (t == NULL || k == NULL) {
        Py_XDECREF(t);
        Py_XDECREF(k);
        Py_XDECREF(ctx);
        Py_XDECREF(request);
        Py_XDECREF(exc);
        return NULL;
    }
    PyTuple_SET_ITEM(t, 0, k);
    PyTuple_SET_ITEM(t, 1, ctx);
    PyTuple_SET_ITEM(t, 2, request ? request : Py_NewRef(Py_None));
    PyTuple_SET_ITEM(t, 3, exc ? exc : Py_NewRef(Py_None));
    return t;
}

static double
monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A response frame around a handler's result: bytes are a body already encoded (framed like
 * response_frame), anything else goes through ``writer(result, out)`` into a bytearray that
 * already holds the size placeholder and header. New reference, or NULL with an exception. */
/* A response frame as new bytes: int32 size, int32 correlation id, an empty tagged section when
 * ``v1`` (response header v1), then ``body``. NULL with OverflowError when it cannot be framed. */
static PyObject *
build_frame(int32_t corr, int v1, const char *body, Py_ssize_t blen)
{
    Py_ssize_t payload = 4 + v1 + blen;
    if (payload > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "response larger than a frame can say");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, 4 + payload);
    if (out == NULL)
        return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(out);
    uint32_t s = (uint32_t)payload, c = (uint32_t)corr;
    o[0] = s >> 24, o[1] = s >> 16, o[2] = s >> 8, o[3] = s;
    o[4] = c >> 24, o[5] = c >> 16, o[6] = c >> 8, o[7] = c;
    if (v1)
        o[8] = 0;
    memcpy(o + 8 + v1, body, blen);
    return out;
}

/* A response frame around a handler's result: bytes are a body already encoded (build_frame),
 * anything else goes through ``writer(result, out)`` into a bytearray that already holds the
 * size placeholder and header. New reference, or NULL with an exception. */
static PyObject *
frame_result(PyObject *result, PyObject *writer, int32_t corr, int v1)
{
    if (PyBytes_CheckExact(result))
        return build_frame(corr, v1, PyBytes_AS_STRING(result), PyBytes_GET_SIZE(result));
    unsigned char head[9] = {0};
    uint32_t c = (uint32_t)corr;
    head[4] = c >> 24, head[5] = c >> 16, head[6] = c >> 8, head[7] = c;
    Py_ssize_t hlen = 8 + v1;
    PyObject *w = PyByteArray_FromStringAndSize((const char *)head, hlen);
    if (w == NULL)
        return NULL;
    PyObject *wargs[2] = {result, w};
    PyObject *r = PyObject_Vectorcall(writer, wargs, 2, NULL);
    if (r == NULL) {
        Py_DECREF(w);
        return NULL;
    }
    Py_DECREF(r);
    Py_ssize_t len = PyByteArray_GET_SIZE(w);
    if (len < hlen || len - 4 > INT32_MAX) {
        Py_DECREF(w);
        PyErr_SetString(PyExc_OverflowError, "response larger than a frame can say");
        return NULL;
    }
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(w);
    uint32_t s = (uint32_t)(len - 4);
    o[0] = s >> 24, o[1] = s >> 16, o[2] = s >> 8, o[3] = s;
    return w;
}

static PyObject *metrics_observe_name;

static PyObject *
dispatch(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    walk_t w;
    Py_ssize_t max_frames;
    if (walk_init(&w, args, nargs, 10, "dispatch", &max_frames) < 0)
        return NULL;
    PyObject *table = args[7], *out = args[8], *metrics = args[9];
    if (!PyTuple_Check(table) || !PyList_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "dispatch: table must be a tuple and out a list");
        return NULL;
    }
    Py_ssize_t ntable = PyTuple_GET_SIZE(table);
    int with_metrics = metrics != Py_None;
    PyObject *error = NULL, *stop = NULL;
    Py_ssize_t taken = 0;
    while (taken < max_frames) {
        PyObject *ctx;
        frame_t fi;
        int r = take_frame(&w, &ctx, &fi, &error);
        if (r < 0)
            goto fail;
        if (r != 1)
            break;
        taken++;
        PyObject *entry = fi.api_key < ntable ? PyTuple_GET_ITEM(table, fi.api_key) : Py_None;
        long lo = 0, hi = -1;
        if (entry != Py_None) {
            if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 6) {
                Py_DECREF(ctx);
                PyErr_SetString(PyExc_TypeError, "dispatch: bad table entry");
                goto fail;
            }
            lo = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
            hi = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
            if (PyErr_Occurred()) {
                Py_DECREF(ctx);
                goto fail;
            }
        }
        if (fi.version < lo || fi.version > hi) { /* also: no entry */
            stop = make_stop(0, ctx, NULL, NULL);
            if (stop == NULL)
                goto fail;
            break;
        }
        PyObject *readers = PyTuple_GET_ITEM(entry, 2), *handler = PyTuple_GET_ITEM(entry, 3);
        PyObject *writers = PyTuple_GET_ITEM(entry, 5);
        if (!PyTuple_Check(readers) || !PyTuple_Check(writers) ||
            PyTuple_GET_SIZE(readers) != hi - lo + 1 || PyTuple_GET_SIZE(writers) != hi - lo + 1) {
            Py_DECREF(ctx);
            PyErr_SetString(PyExc_TypeError, "dispatch: readers and writers must cover the versions");
            goto fail;
        }
        long resp_flex = PyLong_AsLong(PyTuple_GET_ITEM(entry, 4));
        if (resp_flex == -1 && PyErr_Occurred()) {
            Py_DECREF(ctx);
            goto fail;
        }
        PyObject *pos = PyLong_FromSsize_t(fi.body_pos);
        if (pos == NULL) {
            Py_DECREF(ctx);
            goto fail;
        }
        PyObject *rargs[2] = {fi.frame, pos};
        PyObject *decoded =
            PyObject_Vectorcall(PyTuple_GET_ITEM(readers, fi.version - lo), rargs, 2, NULL);
        Py_DECREF(pos);
        PyObject *request = NULL;
        if (decoded != NULL) {
            if (PyTuple_Check(decoded) && PyTuple_GET_SIZE(decoded) >= 1)
                request = Py_NewRef(PyTuple_GET_ITEM(decoded, 0));
            else
                PyErr_SetString(PyExc_TypeError, "a reader must return (message, end)");
            Py_DECREF(decoded);
        }
        if (request == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) {
                Py_DECREF(ctx);
                goto fail;
            }
            stop = make_stop(1, ctx, NULL, take_exception());
            if (stop == NULL)
                goto fail;
            break;
        }
        double t0 = with_metrics ? monotonic_s() : 0.0;
        PyObject *hargs[2] = {ctx, request};
        PyObject *result = PyObject_Vectorcall(handler, hargs, 2, NULL);
        PyObject *data = NULL;
        if (result != NULL) {
            data = frame_result(result, PyTuple_GET_ITEM(writers, fi.version - lo), fi.corr,
                                fi.version >= resp_flex);
            Py_DECREF(result);
        }
        if (data == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) {
                Py_DECREF(ctx);
                Py_DECREF(request);
                goto fail;
            }
            stop = make_stop(2, ctx, request, take_exception());
            if (stop == NULL)
                goto fail;
            break;
        }
        Py_DECREF(request);
        Py_DECREF(ctx);
        r = PyList_Append(out, data);
        Py_DECREF(data);
        if (r < 0)
            goto fail;
        if (with_metrics) {
            PyObject *margs[5] = {metrics, PyLong_FromLong(fi.api_key),
                                  PyLong_FromLong(fi.version),
                                  PyFloat_FromDouble(monotonic_s() - t0), Py_False};
            PyObject *m = NULL;
            if (margs[1] && margs[2] && margs[3])
                m = PyObject_VectorcallMethod(metrics_observe_name, margs,
                                              5, NULL);
            Py_XDECREF(margs[1]);
            Py_XDECREF(margs[2]);
            Py_XDECREF(margs[3]);
            if (m == NULL)
                goto fail;
            Py_DECREF(m);
        }
    }
    Py_XDECREF(w.last_cid);
    if (error == NULL)
        error = Py_NewRef(Py_None);
    if (stop == NULL)
        stop = Py_NewRef(Py_None);
    return Py_BuildValue("(nNN)", w.pos, stop, error);
fail:
    Py_XDECREF(w.last_cid);
    Py_XDECREF(error);
    Py_XDECREF(stop);
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
    PyObject *out = build_frame((int32_t)corr, v1, body.buf, body.len);
    PyBuffer_Release(&body);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_frames", (PyCFunction)(void (*)(void))scan_frames, METH_FASTCALL,
     "scan_frames(buf, pos, max_bytes, max_frames, flex, ctx_type, listener) -> (frames, new_pos, error)"},
    {"dispatch", (PyCFunction)(void (*)(void))dispatch, METH_FASTCALL,
     "dispatch(buf, pos, max_bytes, max_frames, flex, ctx_type, listener, table, out, metrics)"
     " -> (new_pos, stop, error)"},
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
    metrics_observe_name = PyUnicode_InternFromString("observe");
    if (metrics_observe_name == NULL)
        return NULL;
    return PyModule_Create(&moduledef);
}
