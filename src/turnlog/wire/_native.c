/* The compiled reader of turnlog.wire.compiled, in C.
 *
 * Why: a replay and a resume spend most of their Python on reading Avro bodies -- a 20-message
 * pause holds about 85 strings, and the generated Python reader pays an interpreter round trip
 * for every byte it looks at. This module walks the same bytes in C.
 *
 * How it stays the same reader: turnlog.wire.native turns a record schema into a small tree of
 * tuples (the "program"), the same tree the Python generator works from, and read() here builds
 * exactly the value the generated reader builds: the same dicts in field order, the same ints,
 * strings, datetimes, enum symbols, and for an array read raw the same (items, count, starts, at)
 * tuple. It never raises for bad bytes. Whatever it cannot read -- a short body, a bad length, an
 * enum index with no symbol, a string that is not UTF-8, a timestamp outside datetime's range --
 * makes it return None, and the caller reads the same bytes with the generated Python reader,
 * which raises the refusal with its reason and detail. So this code may be stricter than the
 * Python reader (that costs speed, not correctness), never more lenient; the property tests in
 * tests/unit/test_native.py hold the two to the same results.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <datetime.h>
#include <stdint.h>
#include <string.h>

enum {
    OP_STRING = 0,
    OP_LONG = 1,
    OP_INT = 2,
    OP_BOOLEAN = 3,
    OP_ENUM = 4,
    OP_UNION = 5, /* ["null", T] */
    OP_ARRAY = 6,
    OP_RECORD = 7,
    OP_MILLIS = 8, /* long, timestamp-millis */
    OP_DOUBLE = 9,
    OP_RAW = 10, /* an array read as (items, count, starts, at) */
    OP_BYTES = 11,
};

typedef struct Node {
    int op;
    Py_ssize_t n;       /* record: fields; enum: symbols */
    struct Node **kids; /* record: its fields; union, array, raw: one */
    PyObject **names;   /* record: field names */
    PyObject **symbols; /* enum */
} Node;

static PyObject *epoch; /* 1970-01-01T00:00:00+00:00 */
static PyObject *empty_raw; /* (b'', 0, (), -1) */

/* --- the program --------------------------------------------------------------------------- */

static void node_free(Node *node) {
    if (node == NULL) return;
    if (node->kids != NULL) {
        Py_ssize_t kids = node->op == OP_RECORD ? node->n : 1;
        for (Py_ssize_t i = 0; i < kids; i++) node_free(node->kids[i]);
        PyMem_Free(node->kids);
    }
    if (node->names != NULL) {
        for (Py_ssize_t i = 0; i < node->n; i++) Py_XDECREF(node->names[i]);
        PyMem_Free(node->names);
    }
    if (node->symbols != NULL) {
        for (Py_ssize_t i = 0; i < node->n; i++) Py_XDECREF(node->symbols[i]);
        PyMem_Free(node->symbols);
    }
    PyMem_Free(node);
}

static Node *node_build(PyObject *spec, int depth) {
    if (depth > 64) {
        PyErr_SetString(PyExc_ValueError, "program nested too deep");
        return NULL;
    }
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) < 1) {
        PyErr_SetString(PyExc_TypeError, "a program node is a non-empty tuple");
        return NULL;
    }
    long op = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0));
    if (op == -1 && PyErr_Occurred()) return NULL;
    Node *node = PyMem_Calloc(1, sizeof(Node));
    if (node == NULL) return (Node *)PyErr_NoMemory();
    node->op = (int)op;
    Py_ssize_t size = PyTuple_GET_SIZE(spec);
    switch (op) {
    case OP_STRING:
    case OP_BYTES:
    case OP_LONG:
    case OP_INT:
    case OP_BOOLEAN:
    case OP_MILLIS:
    case OP_DOUBLE:
        return node;
    case OP_ENUM: {
        PyObject *symbols = size == 2 ? PyTuple_GET_ITEM(spec, 1) : NULL;
        if (symbols == NULL || !PyTuple_Check(symbols)) break;
        node->n = PyTuple_GET_SIZE(symbols);
        node->symbols = PyMem_Calloc(node->n ? node->n : 1, sizeof(PyObject *));
        if (node->symbols == NULL) {
            node_free(node);
            return (Node *)PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < node->n; i++) {
            node->symbols[i] = Py_NewRef(PyTuple_GET_ITEM(symbols, i));
        }
        return node;
    }
    case OP_UNION:
    case OP_ARRAY:
    case OP_RAW:
        if (size != 2) break;
        node->kids = PyMem_Calloc(1, sizeof(Node *));
        if (node->kids == NULL) {
            node_free(node);
            return (Node *)PyErr_NoMemory();
        }
        node->kids[0] = node_build(PyTuple_GET_ITEM(spec, 1), depth + 1);
        if (node->kids[0] == NULL) {
            node_free(node);
            return NULL;
        }
        return node;
    case OP_RECORD: {
        if (size != 3) break;
        PyObject *names = PyTuple_GET_ITEM(spec, 1), *fields = PyTuple_GET_ITEM(spec, 2);
        if (!PyTuple_Check(names) || !PyTuple_Check(fields) ||
            PyTuple_GET_SIZE(names) != PyTuple_GET_SIZE(fields)) {
            break;
        }
        node->n = PyTuple_GET_SIZE(names);
        Py_ssize_t slots = node->n ? node->n : 1;
        node->names = PyMem_Calloc(slots, sizeof(PyObject *));
        node->kids = PyMem_Calloc(slots, sizeof(Node *));
        if (node->names == NULL || node->kids == NULL) {
            node_free(node);
            return (Node *)PyErr_NoMemory();
        }
        for (Py_ssize_t i = 0; i < node->n; i++) {
            PyObject *name = PyTuple_GET_ITEM(names, i);
            if (!PyUnicode_Check(name)) {
                node_free(node);
                PyErr_SetString(PyExc_TypeError, "a field name is a str");
                return NULL;
            }
            node->names[i] = Py_NewRef(name);
            node->kids[i] = node_build(PyTuple_GET_ITEM(fields, i), depth + 1);
            if (node->kids[i] == NULL) {
                node_free(node);
                return NULL;
            }
        }
        return node;
    }
    default:
        break;
    }
    node_free(node);
    PyErr_Format(PyExc_ValueError, "a malformed program node (op %ld)", op);
    return NULL;
}

static void program_destroy(PyObject *capsule) {
    node_free(PyCapsule_GetPointer(capsule, "turnlog.wire._native.program"));
}

static PyObject *native_compile(PyObject *self, PyObject *spec) {
    Node *root = node_build(spec, 0);
    if (root == NULL) return NULL;
    PyObject *capsule = PyCapsule_New(root, "turnlog.wire._native.program", program_destroy);
    if (capsule == NULL) node_free(root);
    return capsule;
}

/* --- reading ------------------------------------------------------------------------------- */

typedef struct {
    const unsigned char *d;
    Py_ssize_t p;
    Py_ssize_t end;
} Cursor;

/* Each reader returns 0 on success and -1 when the bytes do not read; a Python error may be set
 * then (out of memory, or a decode error to be cleared), which read() clears or passes on. */

static inline int read_unsigned(Cursor *c, uint64_t *out) {
    uint64_t n = 0;
    for (int i = 0, shift = 0; i < 10; i++, shift += 7) {
        if (c->p >= c->end) return -1;
        unsigned char b = c->d[c->p++];
        if (i == 9 && (b & 0x7F) > 1) return -1; /* beyond 64 bits */
        n |= (uint64_t)(b & 0x7F) << shift;
        if (b < 0x80) {
            *out = n;
            return 0;
        }
    }
    return -1; /* longer than ten bytes */
}

static inline int read_long(Cursor *c, int64_t *out) {
    uint64_t n;
    if (c->p < c->end && c->d[c->p] < 0x80) { /* one byte: most lengths and counts */
        n = c->d[c->p++];
    } else if (read_unsigned(c, &n) < 0) {
        return -1;
    }
    *out = (int64_t)(n >> 1) ^ -(int64_t)(n & 1);
    return 0;
}

/* A string's length and where it starts; the cursor moves past it. */
static inline int read_span(Cursor *c, const unsigned char **start, Py_ssize_t *length) {
    int64_t n;
    if (read_long(c, &n) < 0 || n < 0 || n > c->end - c->p) return -1;
    *start = c->d + c->p;
    *length = (Py_ssize_t)n;
    c->p += (Py_ssize_t)n;
    return 0;
}

/* A block count as the Python reader reads it: negative counts are followed by a byte size
 * (read and ignored); a count larger than the bytes left is refused (every item of our schemas
 * takes at least one byte). */
static inline int read_block(Cursor *c, int64_t *count) {
    int64_t n, size;
    if (read_long(c, &n) < 0) return -1;
    if (n < 0) {
        if (n == INT64_MIN) return -1;
        n = -n;
        if (read_long(c, &size) < 0) return -1;
    }
    if (n > c->end - c->p) return -1;
    *count = n;
    return 0;
}

static int is_ascii(const unsigned char *s, Py_ssize_t n) {
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t word;
        memcpy(&word, s + i, 8);
        if (word & 0x8080808080808080ULL) return 0;
    }
    for (; i < n; i++) {
        if (s[i] & 0x80) return 0;
    }
    return 1;
}

static PyObject *read_value(Cursor *c, const Node *node);

/* Walks one value, building nothing, with every check read_value makes (strings: UTF-8). */
static int skip_value(Cursor *c, const Node *node) {
    switch (node->op) {
    case OP_BYTES: {
        const unsigned char *s;
        Py_ssize_t n;
        return read_span(c, &s, &n);
    }
    case OP_STRING: {
        const unsigned char *s;
        Py_ssize_t n;
        if (read_span(c, &s, &n) < 0) return -1;
        if (!is_ascii(s, n)) {
            PyObject *text = PyUnicode_DecodeUTF8((const char *)s, n, NULL);
            if (text == NULL) return -1;
            Py_DECREF(text);
        }
        return 0;
    }
    case OP_LONG:
    case OP_INT:
    case OP_BOOLEAN:
    case OP_ENUM:
    case OP_MILLIS:
    case OP_DOUBLE:
    case OP_ARRAY:
    case OP_RAW: {
        if (node->op == OP_LONG) {
            int64_t v;
            return read_long(c, &v);
        }
        if (node->op == OP_ENUM) {
            int64_t v;
            if (read_long(c, &v) < 0 || v < 0 || v >= node->n) return -1;
            return 0;
        }
        if (node->op == OP_ARRAY || node->op == OP_RAW) {
            for (;;) {
                int64_t count;
                if (read_block(c, &count) < 0) return -1;
                if (count == 0) return 0;
                for (int64_t i = 0; i < count; i++) {
                    if (skip_value(c, node->kids[0]) < 0) return -1;
                }
            }
        }
        /* the rest are cheap enough to build and drop */
        PyObject *value = read_value(c, node);
        if (value == NULL) return -1;
        Py_DECREF(value);
        return 0;
    }
    case OP_UNION: {
        if (c->p >= c->end) return -1;
        unsigned char branch = c->d[c->p++];
        if (branch == 0) return 0;
        if (branch != 2) return -1;
        return skip_value(c, node->kids[0]);
    }
    case OP_RECORD:
        for (Py_ssize_t i = 0; i < node->n; i++) {
            if (skip_value(c, node->kids[i]) < 0) return -1;
        }
        return 0;
    }
    return -1;
}

static PyObject *read_raw(Cursor *c, const Node *node) {
    if (c->p >= c->end) return NULL;
    if (c->d[c->p] == 0) {
        c->p++;
        return Py_NewRef(empty_raw);
    }
    PyObject *starts = PyList_New(0);
    PyObject *parts = PyList_New(0);
    PyObject *result = NULL, *items = NULL, *starts_tuple = NULL;
    Py_ssize_t first = -1, shift = 0, total = 0;
    if (starts == NULL || parts == NULL) goto done;
    for (;;) {
        int64_t count;
        if (read_block(c, &count) < 0) goto done;
        if (count == 0) break;
        total += (Py_ssize_t)count;
        first = c->p;
        shift -= c->p;
        for (int64_t i = 0; i < count; i++) {
            PyObject *at = PyLong_FromSsize_t(c->p + shift);
            if (at == NULL) goto done;
            int appended = PyList_Append(starts, at);
            Py_DECREF(at);
            if (appended < 0 || skip_value(c, node->kids[0]) < 0) goto done;
        }
        PyObject *part = PyBytes_FromStringAndSize((const char *)c->d + first, c->p - first);
        if (part == NULL) goto done;
        int appended = PyList_Append(parts, part);
        Py_DECREF(part);
        if (appended < 0) goto done;
        shift += c->p;
    }
    starts_tuple = PyList_AsTuple(starts);
    if (starts_tuple == NULL) goto done;
    if (PyList_GET_SIZE(parts) == 1) {
        items = Py_NewRef(PyList_GET_ITEM(parts, 0));
    } else {
        Py_ssize_t length = 0, parts_n = PyList_GET_SIZE(parts);
        for (Py_ssize_t i = 0; i < parts_n; i++) length += PyBytes_GET_SIZE(PyList_GET_ITEM(parts, i));
        items = PyBytes_FromStringAndSize(NULL, length);
        if (items == NULL) goto done;
        char *out = PyBytes_AS_STRING(items);
        for (Py_ssize_t i = 0; i < parts_n; i++) {
            PyObject *part = PyList_GET_ITEM(parts, i);
            memcpy(out, PyBytes_AS_STRING(part), PyBytes_GET_SIZE(part));
            out += PyBytes_GET_SIZE(part);
        }
        first = -1;
    }
    result = Py_BuildValue("(OnOn)", items, total, starts_tuple, first);
done:
    Py_XDECREF(items);
    Py_XDECREF(starts_tuple);
    Py_XDECREF(starts);
    Py_XDECREF(parts);
    return result;
}

static PyObject *read_millis(int64_t ms) {
    /* As _EPOCH_UTC + timedelta(milliseconds=ms): floor division, and timedelta's own range. */
    int64_t days = ms / 86400000, rest = ms % 86400000;
    if (rest < 0) {
        rest += 86400000;
        days -= 1;
    }
    if (days > 999999999 || days < -999999999) return NULL;
    PyObject *delta = PyDelta_FromDSU((int)days, (int)(rest / 1000), (int)(rest % 1000) * 1000);
    if (delta == NULL) return NULL;
    PyObject *moment = PyNumber_Add(epoch, delta); /* OverflowError outside datetime's range */
    Py_DECREF(delta);
    return moment;
}

static PyObject *read_value(Cursor *c, const Node *node) {
    switch (node->op) {
    case OP_BYTES: {
        const unsigned char *s;
        Py_ssize_t n;
        if (read_span(c, &s, &n) < 0) return NULL;
        return PyBytes_FromStringAndSize((const char *)s, n);
    }
    case OP_STRING: {
        const unsigned char *s;
        Py_ssize_t n;
        if (read_span(c, &s, &n) < 0) return NULL;
        return PyUnicode_DecodeUTF8((const char *)s, n, NULL);
    }
    case OP_LONG: {
        int64_t v;
        if (read_long(c, &v) < 0) return NULL;
        return PyLong_FromLongLong(v);
    }
    case OP_INT: {
        int64_t v;
        if (read_long(c, &v) < 0 || v < INT32_MIN || v > INT32_MAX) return NULL;
        return PyLong_FromLongLong(v);
    }
    case OP_BOOLEAN: {
        if (c->p >= c->end) return NULL;
        unsigned char b = c->d[c->p++];
        if (b > 1) return NULL;
        return Py_NewRef(b ? Py_True : Py_False);
    }
    case OP_ENUM: {
        int64_t v;
        if (read_long(c, &v) < 0 || v < 0 || v >= node->n) return NULL;
        return Py_NewRef(node->symbols[v]);
    }
    case OP_UNION: {
        if (c->p >= c->end) return NULL;
        unsigned char branch = c->d[c->p++];
        if (branch == 0) return Py_NewRef(Py_None);
        if (branch != 2) return NULL;
        return read_value(c, node->kids[0]);
    }
    case OP_ARRAY: {
        PyObject *list = PyList_New(0);
        if (list == NULL) return NULL;
        for (;;) {
            int64_t count;
            if (read_block(c, &count) < 0) break;
            if (count == 0) return list;
            int64_t i = 0;
            for (; i < count; i++) {
                PyObject *item = read_value(c, node->kids[0]);
                if (item == NULL) break;
                int appended = PyList_Append(list, item);
                Py_DECREF(item);
                if (appended < 0) break;
            }
            if (i < count) break;
        }
        Py_DECREF(list);
        return NULL;
    }
    case OP_RECORD: {
        PyObject *dict = PyDict_New();
        if (dict == NULL) return NULL;
        for (Py_ssize_t i = 0; i < node->n; i++) {
            PyObject *value = read_value(c, node->kids[i]);
            if (value == NULL) {
                Py_DECREF(dict);
                return NULL;
            }
            int set = PyDict_SetItem(dict, node->names[i], value);
            Py_DECREF(value);
            if (set < 0) {
                Py_DECREF(dict);
                return NULL;
            }
        }
        return dict;
    }
    case OP_MILLIS: {
        int64_t v;
        if (read_long(c, &v) < 0) return NULL;
        return read_millis(v);
    }
    case OP_DOUBLE: {
        if (c->end - c->p < 8) return NULL;
        double v = PyFloat_Unpack8((const char *)c->d + c->p, 1);
        if (v == -1.0 && PyErr_Occurred()) return NULL;
        c->p += 8;
        return PyFloat_FromDouble(v);
    }
    case OP_RAW:
        return read_raw(c, node);
    }
    return NULL;
}

/* read(program, data, start) -> (value, end) | None */
static PyObject *native_read(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "read(program, data, start)");
        return NULL;
    }
    Node *root = PyCapsule_GetPointer(args[0], "turnlog.wire._native.program");
    if (root == NULL) return NULL;
    if (!PyBytes_CheckExact(args[1])) Py_RETURN_NONE; /* the Python reader takes the rest */
    Py_ssize_t start = PyLong_AsSsize_t(args[2]);
    if (start == -1 && PyErr_Occurred()) return NULL;
    Cursor c = {(const unsigned char *)PyBytes_AS_STRING(args[1]), start,
                PyBytes_GET_SIZE(args[1])};
    if (start < 0 || start > c.end) Py_RETURN_NONE;
    PyObject *value = read_value(&c, root);
    if (value == NULL) {
        if (PyErr_Occurred()) {
            if (PyErr_ExceptionMatches(PyExc_MemoryError)) return NULL;
            PyErr_Clear(); /* a decode or range error: the Python reader words it */
        }
        Py_RETURN_NONE;
    }
    PyObject *end = PyLong_FromSsize_t(c.p);
    if (end == NULL) {
        Py_DECREF(value);
        return NULL;
    }
    PyObject *pair = PyTuple_Pack(2, value, end);
    Py_DECREF(value);
    Py_DECREF(end);
    return pair;
}

static PyMethodDef methods[] = {
    {"compile", native_compile, METH_O, "compile(program) -> an opaque program for read()"},
    {"read", (PyCFunction)(void (*)(void))native_read, METH_FASTCALL,
     "read(program, data, start) -> (value, end), or None where the bytes do not read"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "The compiled Avro reader in C (see turnlog.wire.native).",
    -1, methods,
};

#ifndef TURNLOG_NATIVE_SOURCE
#define TURNLOG_NATIVE_SOURCE ""
#endif

PyMODINIT_FUNC PyInit__native(void) {
    PyDateTime_IMPORT;
    if (PyDateTimeAPI == NULL) return NULL;
    epoch = PyDateTimeAPI->DateTime_FromDateAndTime(1970, 1, 1, 0, 0, 0, 0, PyDateTimeAPI->TimeZone_UTC,
                                                     PyDateTimeAPI->DateTimeType);
    if (epoch == NULL) return NULL;
    empty_raw = Py_BuildValue("(yn()n)", "", (Py_ssize_t)0, (Py_ssize_t)-1);
    if (empty_raw == NULL) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    /* The SHA-256 of this file as it was built, so a checkout can tell a stale build. */
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", TURNLOG_NATIVE_SOURCE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
