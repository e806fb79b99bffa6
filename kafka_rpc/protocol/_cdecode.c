/*
 * kafka_rpc.protocol._cdecode: the native decoder for the generated message classes.
 *
 * Hand-written and generic: it knows Kafka's wire primitives, not any message. Each generated
 * module hands it a *program* per version (nested tuples emitted by codegen from the same model
 * that emits the pure-Python readers) and gets back a Reader, a callable ``(buf, pos=0) ->
 * (message, end)`` with exactly the semantics of the generated Python ``read_vN`` functions:
 *
 *   - fixed-width big-endian integers, float64, bool, UUID (a uuid.UUID, never None);
 *   - classic (int16/int32 length, negative = null) and compact (uvarint length + 1, 0 = null)
 *     strings, bytes, records and arrays; strings longer than 0x7FFF bytes are rejected
 *     (Kafka's Readable.readString), string bytes must be valid UTF-8;
 *   - array counts are checked against the bytes remaining *before* anything is allocated
 *     (Kafka's "Tried to allocate a collection of size N, but there are only M bytes remaining");
 *   - nullable structs: int8 marker (negative = null); tagged nullable structs: uvarint marker;
 *   - tagged-field sections: known tags decoded into their field by type (the size ignored,
 *     as Kafka), tags valid only at other versions rejected, unknown tags skipped (their size
 *     must fit).
 *
 * Errors are the codec's documented family only (kafka_rpc.protocol.errors): BufferUnderflow when
 * the input ends early, InvalidLength for bad lengths/counts/varints, DecodeError for the rest.
 * Messages are built by allocating the (frozen, slotted) dataclass and storing its slots
 * directly, which is what the Python readers do through the ``__class__`` switch.
 *
 * Program layout (see codegen/emit.py, ``_emit_program``):
 *   (cls, version, flexible, regular, tagged, other_tags, defaults)
 *   regular  = ((attr, kind, flags, sub_program_or_None, what), ...)      wire order
 *   tagged   = ((tag, attr, kind, flags, sub_program_or_None, what), ...)
 *   defaults = ((attr, value), ...)    every field not in ``regular`` (absent and tagged fields)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdint.h>
#include <string.h>

enum {
    K_BOOL = 1, K_INT8, K_INT16, K_UINT16, K_INT32, K_UINT32, K_INT64, K_FLOAT64, K_UUID,
    K_STRING, K_BYTES, K_STRUCT
};
enum { F_NULLABLE = 1, F_COMPACT = 2, F_ARRAY = 4 };

#define SLOT(o, off) (*(PyObject **)((char *)(o) + (off)))
#define MAX_DEPTH 64

typedef struct Prog Prog;

typedef struct {
    Py_ssize_t offset; /* slot offset in the instance */
    int kind, flags;
    long tag;
    Prog *sub;
    PyObject *what; /* borrowed (kept alive by Prog.src) */
} Field;

struct Prog {
    PyTypeObject *cls; /* borrowed (kept alive by src) */
    long version;
    int flexible;
    Py_ssize_t nreg, ntag, nother, ndef;
    Field *reg, *tagged;
    long *other;
    Py_ssize_t *def_off;
    PyObject **def_val; /* borrowed (kept alive by src) */
    PyObject *src;      /* owned */
};

static PyObject *DecodeError, *BufferUnderflow, *InvalidLength;
static PyTypeObject *UUIDType;
static Py_ssize_t uuid_int_off, uuid_safe_off;
static PyObject *safe_unknown;

typedef struct {
    const unsigned char *b;
    Py_ssize_t n;
} Buf;

/* ------------------------------------------------------------------------------------ errors */

static void
underflow(PyObject *what)
{
    PyErr_Format(BufferUnderflow, "not enough bytes for %U", what);
}

static void
truncated(void)
{
    PyErr_SetString(BufferUnderflow, "truncated input");
}

/* ----------------------------------------------------------------------------- primitives */

/* Unsigned varint of at most 5 bytes as Java's int (ByteUtils.readUnsignedVarint). */
static int
read_uvarint(const Buf *B, Py_ssize_t *p, int32_t *out)
{
    uint32_t v = 0;
    int shift = 0;
    for (int i = 0; i < 5; i++) {
        if (*p >= B->n) {
            PyErr_SetString(BufferUnderflow, "truncated varint");
            return -1;
        }
        unsigned char c = B->b[(*p)++];
        v |= (uint32_t)(c & 0x7F) << shift;
        if (c < 0x80) {
            *out = (int32_t)v;
            return 0;
        }
        shift += 7;
    }
    PyErr_SetString(InvalidLength, "varint is longer than 5 bytes");
    return -1;
}

static inline uint16_t
be16(const unsigned char *s)
{
    return (uint16_t)((s[0] << 8) | s[1]);
}

static inline uint32_t
be32(const unsigned char *s)
{
    return ((uint32_t)s[0] << 24) | ((uint32_t)s[1] << 16) | ((uint32_t)s[2] << 8) | s[3];
}

static inline uint64_t
be64(const unsigned char *s)
{
    return ((uint64_t)be32(s) << 32) | be32(s + 4);
}

/* Kafka lengths: compact = uvarint - 1 (as a Python int would compute it, no wrap-around);
 * classic = int16 for strings, int32 for bytes/records/arrays. */
static int
read_len(const Buf *B, Py_ssize_t *p, int compact, int classic16, int64_t *n)
{
    if (compact) {
        int32_t v;
        if (read_uvarint(B, p, &v) < 0)
            return -1;
        *n = (int64_t)v - 1;
        return 0;
    }
    if (classic16) {
        if (*p + 2 > B->n) {
            truncated();
            return -1;
        }
        *n = (int16_t)be16(B->b + *p);
        *p += 2;
        return 0;
    }
    if (*p + 4 > B->n) {
        truncated();
        return -1;
    }
    *n = (int32_t)be32(B->b + *p);
    *p += 4;
    return 0;
}

static const int WIDTH[] = {0, 1, 1, 2, 2, 4, 4, 8, 8, 16};

static PyObject *
make_uuid(const unsigned char *s)
{
    PyObject *i = _PyLong_FromByteArray(s, 16, 0, 0);
    if (i == NULL)
        return NULL;
    PyObject *u = UUIDType->tp_alloc(UUIDType, 0);
    if (u == NULL) {
        Py_DECREF(i);
        return NULL;
    }
    SLOT(u, uuid_int_off) = i;
    Py_INCREF(safe_unknown);
    SLOT(u, uuid_safe_off) = safe_unknown;
    return u;
}

/* A fixed-width value at s (bounds already checked). */
static PyObject *
fixed_value(int kind, const unsigned char *s)
{
    switch (kind) {
    case K_BOOL:
        return PyBool_FromLong(s[0] != 0);
    case K_INT8:
        return PyLong_FromLong((int8_t)s[0]);
    case K_INT16:
        return PyLong_FromLong((int16_t)be16(s));
    case K_UINT16:
        return PyLong_FromLong(be16(s));
    case K_INT32:
        return PyLong_FromLong((int32_t)be32(s));
    case K_UINT32:
        return PyLong_FromUnsignedLong(be32(s));
    case K_INT64:
        return PyLong_FromLongLong((int64_t)be64(s));
    case K_FLOAT64: {
        uint64_t bits = be64(s);
        double d;
        memcpy(&d, &bits, sizeof d);
        return PyFloat_FromDouble(d);
    }
    case K_UUID:
        return make_uuid(s);
    }
    PyErr_SetString(PyExc_SystemError, "bad fixed kind");
    return NULL;
}

static PyObject *read_struct(const Prog *P, const Buf *B, Py_ssize_t *p, int depth);

/* A string or bytes value; ``nullable`` false for array elements and non-nullable fields. */
static PyObject *
read_varlen(const Buf *B, Py_ssize_t *p, int kind, int compact, int nullable, PyObject *what)
{
    int64_t n;
    if (read_len(B, p, compact, kind == K_STRING, &n) < 0)
        return NULL;
    if (n < 0) {
        if (nullable)
            Py_RETURN_NONE;
        PyErr_Format(DecodeError, "non-nullable field %U was serialized as null", what);
        return NULL;
    }
    if (kind == K_STRING && n > 0x7FFF) {
        PyErr_Format(InvalidLength, "%U had invalid length %lld", what, (long long)n);
        return NULL;
    }
    if (n > B->n - *p) {
        underflow(what);
        return NULL;
    }
    const char *s = (const char *)B->b + *p;
    *p += (Py_ssize_t)n;
    if (kind == K_BYTES)
        return PyBytes_FromStringAndSize(s, (Py_ssize_t)n);
    PyObject *r = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, NULL);
    if (r == NULL) {
        PyErr_Clear();
        PyErr_Format(DecodeError, "%U is not valid UTF-8", what);
    }
    return r;
}

static PyObject *
read_array(const Field *f, const Buf *B, Py_ssize_t *p, int depth)
{
    int64_t n;
    if (read_len(B, p, f->flags & F_COMPACT, 0, &n) < 0)
        return NULL;
    if (n < 0) {
        if (f->flags & F_NULLABLE)
            Py_RETURN_NONE;
        PyErr_Format(DecodeError, "non-nullable field %U was serialized as null", f->what);
        return NULL;
    }
    Py_ssize_t remaining = B->n - *p;
    if (n > remaining) {
        PyErr_Format(InvalidLength,
                     "Tried to allocate a collection of size %lld for %U, but there are only "
                     "%zd bytes remaining",
                     (long long)n, f->what, remaining);
        return NULL;
    }
    int kind = f->kind;
    if (kind >= K_INT8 && kind <= K_FLOAT64 && (int64_t)WIDTH[kind] * n > remaining) {
        truncated();
        return NULL;
    }
    PyObject *t = PyTuple_New((Py_ssize_t)n);
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < (Py_ssize_t)n; i++) {
        PyObject *y;
        switch (kind) {
        case K_STRUCT:
            y = read_struct(f->sub, B, p, depth + 1);
            break;
        case K_STRING:
        case K_BYTES:
            y = read_varlen(B, p, kind, f->flags & F_COMPACT, 0, f->what);
            break;
        case K_UUID:
            if (*p + 16 > B->n) {
                underflow(f->what);
                y = NULL;
                break;
            }
            y = make_uuid(B->b + *p);
            *p += 16;
            break;
        case K_BOOL:
            if (*p >= B->n) {
                truncated();
                y = NULL;
                break;
            }
            y = PyBool_FromLong(B->b[*p] != 0);
            *p += 1;
            break;
        default: /* fixed-width integers and float64, bounds checked above */
            y = fixed_value(kind, B->b + *p);
            *p += WIDTH[kind];
            break;
        }
        if (y == NULL) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, y);
    }
    return t;
}

/* One regular (untagged) field's value. */
static PyObject *
read_field(const Field *f, const Buf *B, Py_ssize_t *p, int depth)
{
    if (f->flags & F_ARRAY)
        return read_array(f, B, p, depth);
    int kind = f->kind;
    if (kind == K_STRUCT) {
        if (f->flags & F_NULLABLE) {
            if (*p >= B->n) {
                truncated();
                return NULL;
            }
            if (B->b[*p] >= 0x80) {
                *p += 1;
                Py_RETURN_NONE;
            }
            *p += 1;
        }
        return read_struct(f->sub, B, p, depth + 1);
    }
    if (kind == K_STRING || kind == K_BYTES)
        return read_varlen(B, p, kind, f->flags & F_COMPACT, f->flags & F_NULLABLE, f->what);
    if (*p + WIDTH[kind] > B->n) {
        truncated();
        return NULL;
    }
    PyObject *r = fixed_value(kind, B->b + *p);
    *p += WIDTH[kind];
    return r;
}

/* A tagged field's payload (struct fields: uvarint null marker when nullable). */
static PyObject *
read_tagged(const Field *f, const Buf *B, Py_ssize_t *p, int depth)
{
    if (f->kind == K_STRUCT && !(f->flags & F_ARRAY)) {
        if (f->flags & F_NULLABLE) {
            int32_t m;
            if (read_uvarint(B, p, &m) < 0)
                return NULL;
            if (m <= 0)
                Py_RETURN_NONE;
        }
        return read_struct(f->sub, B, p, depth + 1);
    }
    return read_field(f, B, p, depth);
}

static PyObject *
read_struct(const Prog *P, const Buf *B, Py_ssize_t *p, int depth)
{
    if (depth > MAX_DEPTH) {
        PyErr_SetString(DecodeError, "structs nested too deeply");
        return NULL;
    }
    PyObject *o = P->cls->tp_alloc(P->cls, 0);
    if (o == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < P->ndef; i++) {
        Py_INCREF(P->def_val[i]);
        SLOT(o, P->def_off[i]) = P->def_val[i];
    }
    for (Py_ssize_t i = 0; i < P->nreg; i++) {
        const Field *f = &P->reg[i];
        PyObject *v = read_field(f, B, p, depth);
        if (v == NULL)
            goto fail;
        SLOT(o, f->offset) = v;
    }
    if (P->flexible) {
        int32_t count;
        if (read_uvarint(B, p, &count) < 0)
            goto fail;
        for (int32_t k = 0; k < count; k++) {
            int32_t tag, size;
            if (read_uvarint(B, p, &tag) < 0 || read_uvarint(B, p, &size) < 0)
                goto fail;
            if (tag < 0 || size < 0) {
                PyErr_SetString(InvalidLength, "negative tag or tagged-field size");
                goto fail;
            }
            /* A known tag's field is read by its type and its size ignored, as Kafka's generated
             * readers do; only an unknown tag's size is checked, when it is skipped. */
            const Field *tf = NULL;
            for (Py_ssize_t j = 0; j < P->ntag; j++) {
                if (P->tagged[j].tag == tag) {
                    tf = &P->tagged[j];
                    break;
                }
            }
            if (tf != NULL) {
                PyObject *v = read_tagged(tf, B, p, depth);
                if (v == NULL)
                    goto fail;
                PyObject *old = SLOT(o, tf->offset);
                SLOT(o, tf->offset) = v;
                Py_XDECREF(old);
                continue;
            }
            for (Py_ssize_t j = 0; j < P->nother; j++) {
                if (P->other[j] == tag) {
                    PyErr_Format(DecodeError, "Tag %d is not valid for version %ld", (int)tag,
                                 P->version);
                    goto fail;
                }
            }
            if ((int64_t)*p + size > B->n) {
                PyErr_SetString(BufferUnderflow, "tagged field runs past the end of the buffer");
                goto fail;
            }
            *p += size;
        }
    }
    return o;
fail:
    Py_DECREF(o);
    return NULL;
}

/* ------------------------------------------------------------------------------- compiling */

static void
prog_free(Prog *P)
{
    if (P == NULL)
        return;
    for (Py_ssize_t i = 0; i < P->nreg; i++)
        prog_free(P->reg[i].sub);
    for (Py_ssize_t i = 0; i < P->ntag; i++)
        prog_free(P->tagged[i].sub);
    PyMem_Free(P->reg);
    PyMem_Free(P->tagged);
    PyMem_Free(P->other);
    PyMem_Free(P->def_off);
    PyMem_Free(P->def_val);
    Py_XDECREF(P->src);
    PyMem_Free(P);
}

static int
slot_offset(PyTypeObject *cls, PyObject *attr, Py_ssize_t *off)
{
    PyObject *d = cls->tp_dict ? PyDict_GetItemWithError(cls->tp_dict, attr) : NULL;
    if (d == NULL || !Py_IS_TYPE(d, &PyMemberDescr_Type)) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s has no slot %R", cls->tp_name, attr);
        return -1;
    }
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    if (m->type != T_OBJECT_EX || (m->flags & READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%U is not an object slot", cls->tp_name, attr);
        return -1;
    }
    *off = m->offset;
    return 0;
}

static Prog *compile(PyObject *src, int depth);

/* fill f from (attr, kind, flags, sub, what) starting at item ``at`` of tuple t */
static int
compile_field(PyTypeObject *cls, PyObject *t, Py_ssize_t at, Field *f, int depth)
{
    PyObject *attr = PyTuple_GET_ITEM(t, at);
    f->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, at + 1));
    f->flags = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, at + 2));
    PyObject *sub = PyTuple_GET_ITEM(t, at + 3);
    f->what = PyTuple_GET_ITEM(t, at + 4);
    if (PyErr_Occurred())
        return -1;
    if (!PyUnicode_Check(attr) || !PyUnicode_Check(f->what) || f->kind < K_BOOL ||
        f->kind > K_STRUCT || (f->kind == K_STRUCT) != (sub != Py_None)) {
        PyErr_SetString(PyExc_ValueError, "malformed field in decoder program");
        return -1;
    }
    if (slot_offset(cls, attr, &f->offset) < 0)
        return -1;
    if (sub != Py_None) {
        f->sub = compile(sub, depth + 1);
        if (f->sub == NULL)
            return -1;
    }
    return 0;
}

static Prog *
compile(PyObject *src, int depth)
{
    if (depth > MAX_DEPTH) {
        PyErr_SetString(PyExc_ValueError, "decoder program nested too deeply");
        return NULL;
    }
    if (!PyTuple_Check(src) || PyTuple_GET_SIZE(src) != 7) {
        PyErr_SetString(PyExc_ValueError, "decoder program must be a 7-tuple");
        return NULL;
    }
    Prog *P = PyMem_Calloc(1, sizeof(Prog));
    if (P == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_INCREF(src);
    P->src = src;
    PyObject *cls = PyTuple_GET_ITEM(src, 0);
    PyObject *reg = PyTuple_GET_ITEM(src, 3), *tagged = PyTuple_GET_ITEM(src, 4);
    PyObject *other = PyTuple_GET_ITEM(src, 5), *defs = PyTuple_GET_ITEM(src, 6);
    if (!PyType_Check(cls) || !PyTuple_Check(reg) || !PyTuple_Check(tagged) ||
        !PyTuple_Check(other) || !PyTuple_Check(defs)) {
        PyErr_SetString(PyExc_ValueError, "malformed decoder program");
        goto fail;
    }
    P->cls = (PyTypeObject *)cls;
    P->version = PyLong_AsLong(PyTuple_GET_ITEM(src, 1));
    P->flexible = PyObject_IsTrue(PyTuple_GET_ITEM(src, 2));
    if (PyErr_Occurred())
        goto fail;
    P->nreg = PyTuple_GET_SIZE(reg);
    P->ntag = PyTuple_GET_SIZE(tagged);
    P->nother = PyTuple_GET_SIZE(other);
    P->ndef = PyTuple_GET_SIZE(defs);
    P->reg = PyMem_Calloc(P->nreg + 1, sizeof(Field));
    P->tagged = PyMem_Calloc(P->ntag + 1, sizeof(Field));
    P->other = PyMem_Calloc(P->nother + 1, sizeof(long));
    P->def_off = PyMem_Calloc(P->ndef + 1, sizeof(Py_ssize_t));
    P->def_val = PyMem_Calloc(P->ndef + 1, sizeof(PyObject *));
    if (!P->reg || !P->tagged || !P->other || !P->def_off || !P->def_val) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t i = 0; i < P->nreg; i++) {
        PyObject *t = PyTuple_GET_ITEM(reg, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 5) {
            PyErr_SetString(PyExc_ValueError, "regular field must be a 5-tuple");
            goto fail;
        }
        if (compile_field(P->cls, t, 0, &P->reg[i], depth) < 0)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < P->ntag; i++) {
        PyObject *t = PyTuple_GET_ITEM(tagged, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 6) {
            PyErr_SetString(PyExc_ValueError, "tagged field must be a 6-tuple");
            goto fail;
        }
        P->tagged[i].tag = PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
        if (PyErr_Occurred() || compile_field(P->cls, t, 1, &P->tagged[i], depth) < 0)
            goto fail;
    }
    for (Py_ssize_t i = 0; i < P->nother; i++) {
        P->other[i] = PyLong_AsLong(PyTuple_GET_ITEM(other, i));
        if (PyErr_Occurred())
            goto fail;
    }
    for (Py_ssize_t i = 0; i < P->ndef; i++) {
        PyObject *t = PyTuple_GET_ITEM(defs, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 2) {
            PyErr_SetString(PyExc_ValueError, "default must be a 2-tuple");
            goto fail;
        }
        if (slot_offset(P->cls, PyTuple_GET_ITEM(t, 0), &P->def_off[i]) < 0)
            goto fail;
        P->def_val[i] = PyTuple_GET_ITEM(t, 1);
    }
    /* every slot must be written: regular fields + defaults cover all of __slots__ */
    PyObject *slots = PyObject_GetAttrString(cls, "__slots__");
    if (slots == NULL)
        goto fail;
    Py_ssize_t nslots = PyObject_Length(slots);
    Py_DECREF(slots);
    if (nslots < 0)
        goto fail;
    if (nslots != P->nreg + P->ndef) {
        PyErr_Format(PyExc_ValueError, "program for %s covers %zd of %zd slots",
                     P->cls->tp_name, P->nreg + P->ndef, nslots);
        goto fail;
    }
    return P;
fail:
    prog_free(P);
    return NULL;
}

/* ---------------------------------------------------------------------------------- Reader */

typedef struct {
    PyObject_HEAD
    Prog *prog;
    vectorcallfunc vectorcall;
} Reader;

static PyObject *
reader_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if ((kwnames && PyTuple_GET_SIZE(kwnames)) || nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "Reader expects (buf, pos=0)");
        return NULL;
    }
    Py_ssize_t pos = 0;
    if (nargs == 2) {
        pos = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
        if (pos == -1 && PyErr_Occurred())
            return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0)
        return NULL;
    PyObject *result = NULL;
    if (pos < 0 || pos > view.len) {
        PyErr_Format(BufferUnderflow, "start position %zd outside a buffer of %zd bytes", pos,
                     view.len);
        goto done;
    }
    Buf B = {(const unsigned char *)view.buf, view.len};
    Py_ssize_t p = pos;
    PyObject *o = read_struct(((Reader *)self)->prog, &B, &p, 0);
    if (o == NULL)
        goto done;
    PyObject *end = PyLong_FromSsize_t(p);
    if (end == NULL) {
        Py_DECREF(o);
        goto done;
    }
    result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(o);
        Py_DECREF(end);
        goto done;
    }
    PyTuple_SET_ITEM(result, 0, o);
    PyTuple_SET_ITEM(result, 1, end);
done:
    PyBuffer_Release(&view);
    if (result == NULL && PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyErr_Clear();
        PyErr_SetString(DecodeError, "out of memory while decoding");
    }
    return result;
}

static PyObject *
reader_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *src;
    if (!PyArg_ParseTuple(args, "O:Reader", &src))
        return NULL;
    Prog *P = compile(src, 0);
    if (P == NULL)
        return NULL;
    Reader *r = (Reader *)type->tp_alloc(type, 0);
    if (r == NULL) {
        prog_free(P);
        return NULL;
    }
    r->prog = P;
    r->vectorcall = reader_vectorcall;
    return (PyObject *)r;
}

static void
reader_dealloc(Reader *r)
{
    prog_free(r->prog);
    Py_TYPE(r)->tp_free((PyObject *)r);
}

static PyObject *
reader_repr(Reader *r)
{
    return PyUnicode_FromFormat("<_cdecode.Reader %s v%ld>", r->prog->cls->tp_name,
                                r->prog->version);
}

static PyTypeObject ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_rpc.protocol._cdecode.Reader",
    .tp_basicsize = sizeof(Reader),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Reader(program): a compiled decoder; call as reader(buf, pos=0) -> (message, end).",
    .tp_new = reader_new,
    .tp_dealloc = (destructor)reader_dealloc,
    .tp_repr = (reprfunc)reader_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Reader, vectorcall),
};

/* ---------------------------------------------------------------- Constructor
 * Constructor(cls, names): a positional, all-fields constructor for a frozen slotted dataclass
 * (kafka_rpc._frozen checks the class first): allocates a ``cls`` and stores each argument in
 * the slot of the same position, as the decoder does for the messages it builds. Arguments are
 * stored as given: no defaults, no conversions, no __post_init__. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyTypeObject *cls;
    Py_ssize_t n;
    Py_ssize_t *off;
} Constructor;

static PyObject *
constructor_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Constructor *c = (Constructor *)self;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != c->n || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0)) {
        PyErr_Format(PyExc_TypeError, "%s constructor takes exactly %zd positional arguments",
                     c->cls->tp_name, c->n);
        return NULL;
    }
    PyObject *o = c->cls->tp_alloc(c->cls, 0);
    if (o == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < nargs; i++)
        SLOT(o, c->off[i]) = Py_NewRef(args[i]);
    return o;
}

static PyObject *
constructor_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *cls, *names;
    if (!PyArg_ParseTuple(args, "O!O!:Constructor", &PyType_Type, &cls, &PyTuple_Type, &names))
        return NULL;
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    Constructor *c = (Constructor *)type->tp_alloc(type, 0);
    if (c == NULL)
        return NULL;
    c->vectorcall = constructor_vectorcall;
    c->cls = (PyTypeObject *)Py_NewRef(cls);
    c->off = PyMem_Calloc(n ? n : 1, sizeof(Py_ssize_t));
    if (c->off == NULL) {
        Py_DECREF(c);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *name = PyTuple_GET_ITEM(names, i);
        if (!PyUnicode_Check(name) || slot_offset(c->cls, name, &c->off[i]) < 0) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "field names must be str");
            Py_DECREF(c);
            return NULL;
        }
    }
    c->n = n;
    return (PyObject *)c;
}

static void
constructor_dealloc(Constructor *c)
{
    Py_XDECREF(c->cls);
    PyMem_Free(c->off);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static PyObject *
constructor_repr(Constructor *c)
{
    return PyUnicode_FromFormat("<native constructor of %s>", c->cls->tp_name);
}

static PyTypeObject ConstructorType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "kafka_rpc.protocol._cdecode.Constructor",
    .tp_basicsize = sizeof(Constructor),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Constructor(cls, names): positional all-fields constructor of a slotted class.",
    .tp_new = constructor_new,
    .tp_dealloc = (destructor)constructor_dealloc,
    .tp_repr = (reprfunc)constructor_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Constructor, vectorcall),
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_cdecode",
    "Native decoder for kafka_rpc's generated messages (programs emitted by codegen).", -1, NULL,
};

static int
member_offset(PyObject *type, const char *name, Py_ssize_t *off)
{
    PyObject *attr = PyUnicode_FromString(name);
    if (attr == NULL)
        return -1;
    int r = slot_offset((PyTypeObject *)type, attr, off);
    Py_DECREF(attr);
    return r;
}

PyMODINIT_FUNC
PyInit__cdecode(void)
{
    PyObject *errors = PyImport_ImportModule("kafka_rpc.protocol.errors");
    if (errors == NULL)
        return NULL;
    DecodeError = PyObject_GetAttrString(errors, "DecodeError");
    BufferUnderflow = PyObject_GetAttrString(errors, "BufferUnderflow");
    InvalidLength = PyObject_GetAttrString(errors, "InvalidLength");
    Py_DECREF(errors);
    if (!DecodeError || !BufferUnderflow || !InvalidLength)
        return NULL;
    PyObject *uuid = PyImport_ImportModule("uuid");
    if (uuid == NULL)
        return NULL;
    PyObject *uuid_type = PyObject_GetAttrString(uuid, "UUID");
    PyObject *safe = PyObject_GetAttrString(uuid, "SafeUUID");
    Py_DECREF(uuid);
    if (uuid_type == NULL || safe == NULL || !PyType_Check(uuid_type))
        return NULL;
    safe_unknown = PyObject_GetAttrString(safe, "unknown");
    Py_DECREF(safe);
    if (safe_unknown == NULL)
        return NULL;
    UUIDType = (PyTypeObject *)uuid_type;
    if (member_offset(uuid_type, "int", &uuid_int_off) < 0 ||
        member_offset(uuid_type, "is_safe", &uuid_safe_off) < 0)
        return NULL;
    if (PyType_Ready(&ReaderType) < 0 || PyType_Ready(&ConstructorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL)
        return NULL;
    Py_INCREF(&ReaderType);
    if (PyModule_AddObject(m, "Reader", (PyObject *)&ReaderType) < 0) {
        Py_DECREF(&ReaderType);
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(&ConstructorType);
    if (PyModule_AddObject(m, "Constructor", (PyObject *)&ConstructorType) < 0) {
        Py_DECREF(&ConstructorType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
