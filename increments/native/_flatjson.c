/* _flatjson: a decoder of flat JSON lines into Arrow buffers (issue 33).
 *
 * decode(data, fields) -> (rows, columns) | str
 *   data:   the bytes of one JSON-lines file (any object with the buffer protocol)
 *   fields: a sequence of (name: bytes, kind: int), the declared columns in order
 *   columns: one tuple per field, (null_count, validity | None, values, offsets | None), each
 *            buffer a _flatjson.Buffer (buffer protocol, zero-copy into pa.py_buffer):
 *            strings: int32 offsets + UTF-8 values; integers: int8/16/32/64; timestamps: int64
 *            microseconds since the epoch, UTC; doubles: float64; booleans: a bitmap.
 *   str:    a decline: some line is outside the fast path (the reason, for tests); the caller then
 *           reads the file with DuckDB as before, which gives the result or the error.
 *
 * The fast path is the part of DuckDB's read_json (newline_delimited, the columns given, the
 * strict types of increments/sources/file_formats.py) whose result it reproduces exactly: every
 * non-blank line one JSON object; declared keys matched exactly (as DuckDB does), a key given twice
 * declines; undeclared keys skipped, their values validated as strict JSON; a missing key or null
 * is null. Values: strings (escapes decoded, \u included; invalid UTF-8, raw control bytes and
 * lone surrogates decline); integers range-checked per width (a fraction, exponent or overflow
 * declines); doubles from any JSON number (integers converted from their exact value, others by
 * strtod in the "C" locale: correctly rounded, as yyjson; an infinity declines); true/false;
 * timestamps only as "YYYY-MM-DD(T| )hh:mm:ss(.f{1,6})?Z" with valid calendar fields. Anything
 * else (a non-string value for a string column, trailing commas, NaN, comments, a BOM that is not
 * the file's first bytes, an empty object {}, ...) declines. Blank lines (spaces, tabs, CR) are skipped, CRLF ends a
 * line, a BOM at the start of the file is skipped, the last line may lack its newline.
 * The decode runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <locale.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { K_STRING = 0, K_I8 = 1, K_I16 = 2, K_I32 = 3, K_I64 = 4, K_F64 = 5, K_BOOL = 6, K_TS = 7, K_LAST = 7 };

#define MAX_DEPTH 64
#define MAX_LINE ((size_t)67108864)   /* read_json's maximum_object_size in file_formats.py */

/* ---- Buffer: malloc'd bytes exposed through the buffer protocol ---- */
typedef struct {
    PyObject_HEAD
    void *data;
    Py_ssize_t size;
} Buffer;

static void Buffer_dealloc(Buffer *self) {
    free(self->data);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int Buffer_getbuffer(Buffer *self, Py_buffer *view, int flags) {
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data ? self->data : (void *)"", self->size, 1, flags);
}

static PyBufferProcs Buffer_as_buffer = {(getbufferproc)Buffer_getbuffer, NULL};

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "increments.native._flatjson.Buffer",
    .tp_basicsize = sizeof(Buffer),
    .tp_dealloc = (destructor)Buffer_dealloc,
    .tp_as_buffer = &Buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "bytes owned by the decoder, handed to Arrow without a copy",
};

/* Takes ownership of data (freed on failure too). */
static PyObject *buffer_new(void *data, Py_ssize_t size) {
    Buffer *b = PyObject_New(Buffer, &BufferType);
    if (b == NULL) {
        free(data);
        return NULL;
    }
    b->data = data;
    b->size = size;
    return (PyObject *)b;
}

/* ---- columns ---- */
typedef struct {
    const char *name;
    size_t nlen;
    int plain_name;       /* no quote, backslash or control byte: compared in place (read_key) */
    int kind;
    int width;            /* bytes per value (0 for strings and booleans) */
    uint8_t *valid;       /* bitmap */
    uint8_t *values;      /* fixed width values, or the boolean bitmap */
    int32_t *offsets;     /* strings */
    uint8_t *chars;       /* strings */
    size_t clen, ccap;
    int64_t nulls;
    int64_t seen;         /* the last row that set this column */
} Column;

typedef struct {
    Column *cols;
    Py_ssize_t ncols;
    int64_t row;
    Py_ssize_t hint;      /* the column after the last one matched: keys usually come in order */
    const char *why;      /* the reason of a decline */
    int64_t line;
    locale_t c_locale;
    int64_t capacity;     /* rows the columns' buffers hold */
} Decoder;

#define DECLINE(d, reason) do { (d)->why = (reason); return -1; } while (0)

static int reserve_chars(Column *c, size_t extra) {
    if (c->clen + extra <= c->ccap)
        return 0;
    size_t cap = c->ccap ? c->ccap : 65536;
    while (cap < c->clen + extra)
        cap *= 2;
    uint8_t *p = realloc(c->chars, cap);
    if (p == NULL)
        return -1;
    c->chars = p;
    c->ccap = cap;
    return 0;
}

static inline void set_bit(uint8_t *bits, int64_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }

/* ---- lexing ---- */
static inline const uint8_t *skip_ws(const uint8_t *p, const uint8_t *end) {
    while (p < end && (*p == ' ' || *p == '\t' || *p == '\r'))
        p++;
    return p;
}

/* bytes a string copies as they are: printable ASCII but '"' and '\\' */
static uint8_t plain[256];

static void init_tables(void) {
    for (int c = 0; c < 256; c++)
        plain[c] = (c >= 0x20 && c < 0x80 && c != '"' && c != '\\');
}

/* The length of the valid UTF-8 sequence at p (its lead byte >= 0x80), or 0. */
static inline int utf8_len(const uint8_t *p, const uint8_t *end) {
    uint8_t c = p[0];
    if (c >= 0xC2 && c <= 0xDF) {
        if (end - p >= 2 && (p[1] & 0xC0) == 0x80)
            return 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        if (end - p >= 3 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
            if (c == 0xE0 && p[1] < 0xA0)
                return 0;   /* overlong */
            if (c == 0xED && p[1] >= 0xA0)
                return 0;   /* a surrogate */
            return 3;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        if (end - p >= 4 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 && (p[3] & 0xC0) == 0x80) {
            if (c == 0xF0 && p[1] < 0x90)
                return 0;   /* overlong */
            if (c == 0xF4 && p[1] >= 0x90)
                return 0;   /* above U+10FFFF */
            return 4;
        }
    }
    return 0;
}

static inline int hex4(const uint8_t *p, uint32_t *out) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        uint8_t c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9')
            v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            v |= (uint32_t)(c - 'A' + 10);
        else
            return -1;
    }
    *out = v;
    return 0;
}

/* The string whose opening quote is at *pp: decoded into c's chars when c is not NULL (else only
 * validated); *pp ends after the closing quote. */
static int scan_string(Decoder *d, const uint8_t **pp, const uint8_t *end, Column *c) {
    const uint8_t *p = *pp + 1;
    for (;;) {
        const uint8_t *run = p;
        while (p < end && plain[*p])
            p++;
        if (c != NULL && p > run) {
            size_t n = (size_t)(p - run);
            if (reserve_chars(c, n + 4) < 0)
                DECLINE(d, "out of memory");
            memcpy(c->chars + c->clen, run, n);
            c->clen += n;
        }
        if (p >= end)
            DECLINE(d, "a string does not end on its line");
        uint8_t ch = *p;
        if (ch == '"') {
            *pp = p + 1;
            return 0;
        }
        if (ch < 0x20)
            DECLINE(d, "a control character in a string");
        if (ch >= 0x80) {
            int n = utf8_len(p, end);
            if (n == 0)
                DECLINE(d, "invalid UTF-8");
            if (c != NULL) {
                if (reserve_chars(c, 4) < 0)
                    DECLINE(d, "out of memory");
                memcpy(c->chars + c->clen, p, (size_t)n);
                c->clen += (size_t)n;
            }
            p += n;
            continue;
        }
        /* a backslash */
        if (end - p < 2)
            DECLINE(d, "a string does not end on its line");
        uint8_t e = p[1], out;
        switch (e) {
        case '"': out = '"'; break;
        case '\\': out = '\\'; break;
        case '/': out = '/'; break;
        case 'b': out = '\b'; break;
        case 'f': out = '\f'; break;
        case 'n': out = '\n'; break;
        case 'r': out = '\r'; break;
        case 't': out = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (end - p < 6 || hex4(p + 2, &cp) < 0)
                DECLINE(d, "an invalid \\u escape");
            p += 6;
            if (cp >= 0xDC00 && cp <= 0xDFFF)
                DECLINE(d, "a lone surrogate");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, &lo) < 0 || lo < 0xDC00 || lo > 0xDFFF)
                    DECLINE(d, "a lone surrogate");
                p += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (c != NULL) {
                if (reserve_chars(c, 4) < 0)
                    DECLINE(d, "out of memory");
                uint8_t *o = c->chars + c->clen;
                if (cp < 0x80) {
                    o[0] = (uint8_t)cp;
                    c->clen += 1;
                } else if (cp < 0x800) {
                    o[0] = (uint8_t)(0xC0 | (cp >> 6));
                    o[1] = (uint8_t)(0x80 | (cp & 0x3F));
                    c->clen += 2;
                } else if (cp < 0x10000) {
                    o[0] = (uint8_t)(0xE0 | (cp >> 12));
                    o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    o[2] = (uint8_t)(0x80 | (cp & 0x3F));
                    c->clen += 3;
                } else {
                    o[0] = (uint8_t)(0xF0 | (cp >> 18));
                    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
                    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
                    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
                    c->clen += 4;
                }
            }
            continue;
        }
        default:
            DECLINE(d, "an invalid escape");
        }
        if (c != NULL) {
            if (reserve_chars(c, 1) < 0)
                DECLINE(d, "out of memory");
            c->chars[c->clen++] = out;
        }
        p += 2;
    }
}

/* A JSON number's extent at *pp (strict grammar). is_int: no fraction and no exponent. */
static int scan_number(Decoder *d, const uint8_t **pp, const uint8_t *end, int *is_int) {
    const uint8_t *p = *pp;
    if (p < end && *p == '-')
        p++;
    if (p >= end || *p < '0' || *p > '9')
        DECLINE(d, "not a JSON value");
    if (*p == '0') {
        p++;
        if (p < end && *p >= '0' && *p <= '9')
            DECLINE(d, "a number with a leading zero");
    } else {
        while (p < end && *p >= '0' && *p <= '9')
            p++;
    }
    *is_int = 1;
    if (p < end && *p == '.') {
        p++;
        if (p >= end || *p < '0' || *p > '9')
            DECLINE(d, "a number without digits after its point");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *is_int = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        if (p >= end || *p < '0' || *p > '9')
            DECLINE(d, "a number without exponent digits");
        while (p < end && *p >= '0' && *p <= '9')
            p++;
        *is_int = 0;
    }
    *pp = p;
    return 0;
}

/* An integer literal [start, stop) (scan_number's is_int): its value when it fits int64 or, when
 * positive, uint64. Returns 0 (int64 in *v), 1 (uint64 in *u), 2 (larger). */
static int int_value(const uint8_t *s, const uint8_t *stop, int64_t *v, uint64_t *u) {
    int neg = *s == '-';
    if (neg)
        s++;
    uint64_t acc = 0;
    for (; s < stop; s++) {
        uint64_t digit = (uint64_t)(*s - '0');
        if (acc > (UINT64_MAX - digit) / 10)
            return 2;
        acc = acc * 10 + digit;
    }
    if (neg) {
        if (acc > (uint64_t)INT64_MAX + 1)
            return 2;
        *v = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
        return 0;
    }
    if (acc > (uint64_t)INT64_MAX) {
        *u = acc;
        return 1;
    }
    *v = (int64_t)acc;
    return 0;
}

static int skip_value(Decoder *d, const uint8_t **pp, const uint8_t *end, int depth);

static int expect_literal(Decoder *d, const uint8_t **pp, const uint8_t *end, const char *lit, size_t n) {
    if ((size_t)(end - *pp) < n || memcmp(*pp, lit, n) != 0)
        DECLINE(d, "not a JSON value");
    *pp += n;
    return 0;
}

static int skip_value(Decoder *d, const uint8_t **pp, const uint8_t *end, int depth) {
    const uint8_t *p = *pp;
    if (p >= end)
        DECLINE(d, "a value is missing");
    switch (*p) {
    case '"':
        return scan_string(d, pp, end, NULL);
    case 't':
        return expect_literal(d, pp, end, "true", 4);
    case 'f':
        return expect_literal(d, pp, end, "false", 5);
    case 'n':
        return expect_literal(d, pp, end, "null", 4);
    case '{':
    case '[': {
        uint8_t close = *p == '{' ? '}' : ']';
        int obj = *p == '{';
        if (depth >= MAX_DEPTH)
            DECLINE(d, "nested too deep");
        p = skip_ws(p + 1, end);
        if (p < end && *p == close) {
            *pp = p + 1;
            return 0;
        }
        for (;;) {
            if (obj) {
                if (p >= end || *p != '"')
                    DECLINE(d, "an object key is not a string");
                if (scan_string(d, &p, end, NULL) < 0)
                    return -1;
                p = skip_ws(p, end);
                if (p >= end || *p != ':')
                    DECLINE(d, "no colon after a key");
                p = skip_ws(p + 1, end);
            }
            if (skip_value(d, &p, end, depth + 1) < 0)
                return -1;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                p = skip_ws(p + 1, end);
                continue;
            }
            if (p < end && *p == close) {
                *pp = p + 1;
                return 0;
            }
            DECLINE(d, "an object or array does not close");
        }
    }
    default: {
        int is_int;
        return scan_number(d, pp, end, &is_int);
    }
    }
}

/* ---- typed values ---- */
static const int days_in_month[13] = {0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};

static inline int digits(const uint8_t *p, int n, int *out) {
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    *out = v;
    return 0;
}

/* days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil) */
static inline int64_t days_from_civil(int64_t y, int m, int dd) {
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + dd - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* "YYYY-MM-DD(T| )hh:mm:ss(.f{1,6})?Z" at *pp (its opening quote) -> microseconds */
static int parse_timestamp(Decoder *d, const uint8_t **pp, const uint8_t *end, int64_t *out) {
    const uint8_t *p = *pp + 1;
    int y, mo, dd, h, mi, s, frac = 0;
    if (end - p < 21)
        DECLINE(d, "a timestamp outside the fast path's shape");
    if (digits(p, 4, &y) || p[4] != '-' || digits(p + 5, 2, &mo) || p[7] != '-' || digits(p + 8, 2, &dd)
        || (p[10] != 'T' && p[10] != ' ') || digits(p + 11, 2, &h) || p[13] != ':' || digits(p + 14, 2, &mi)
        || p[16] != ':' || digits(p + 17, 2, &s))
        DECLINE(d, "a timestamp outside the fast path's shape");
    p += 19;
    if (*p == '.') {
        int n = 0;
        p++;
        while (p < end && *p >= '0' && *p <= '9' && n < 7) {
            frac = frac * 10 + (*p - '0');
            p++;
            n++;
        }
        if (n == 0 || n > 6)
            DECLINE(d, "a timestamp outside the fast path's shape");
        for (; n < 6; n++)
            frac *= 10;
    }
    if (end - p < 2 || p[0] != 'Z' || p[1] != '"')
        DECLINE(d, "a timestamp outside the fast path's shape");
    if (y < 1 || mo < 1 || mo > 12 || dd < 1 || h > 23 || mi > 59 || s > 59)
        DECLINE(d, "a timestamp outside the fast path's ranges");
    int dim = days_in_month[mo] + (mo == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0));
    if (dd > dim)
        DECLINE(d, "a timestamp outside the fast path's ranges");
    int64_t days = days_from_civil(y, mo, dd);
    *out = ((days * 86400 + h * 3600 + mi * 60 + s) * 1000000) + frac;
    *pp = p + 2;
    return 0;
}

static int parse_double(Decoder *d, const uint8_t **pp, const uint8_t *end, double *out) {
    const uint8_t *start = *pp;
    int is_int;
    if (scan_number(d, pp, end, &is_int) < 0)
        return -1;
    if (is_int) {
        int64_t v;
        uint64_t u;
        int r = int_value(start, *pp, &v, &u);
        if (r == 0) {
            *out = (double)v;
            return 0;
        }
        if (r == 1) {
            *out = (double)u;
            return 0;
        }
    }
    char buf[128];
    size_t n = (size_t)(*pp - start);
    if (n >= sizeof buf)
        DECLINE(d, "a number too long for the fast path");
    memcpy(buf, start, n);
    buf[n] = 0;
    double x = strtod_l(buf, NULL, d->c_locale);
    if (isinf(x) || isnan(x))
        DECLINE(d, "a number out of the double's range");
    *out = x;
    return 0;
}

static int parse_value(Decoder *d, Column *c, const uint8_t **pp, const uint8_t *end) {
    const uint8_t *p = *pp;
    int64_t row = d->row;
    if (p >= end)
        DECLINE(d, "a value is missing");
    if (*p == 'n') {
        if (expect_literal(d, pp, end, "null", 4) < 0)
            return -1;
        c->nulls++;
        if (c->kind == K_STRING)
            c->offsets[row + 1] = (int32_t)c->clen;
        return 0;
    }
    switch (c->kind) {
    case K_STRING:
        if (*p != '"')
            DECLINE(d, "a string column holds another JSON type");
        if (scan_string(d, pp, end, c) < 0)
            return -1;
        if (c->clen > (size_t)INT32_MAX)
            DECLINE(d, "strings over 2 GB");
        c->offsets[row + 1] = (int32_t)c->clen;
        break;
    case K_I8:
    case K_I16:
    case K_I32:
    case K_I64: {
        int is_int;
        int64_t v;
        uint64_t u;
        if (scan_number(d, pp, end, &is_int) < 0)
            return -1;
        if (!is_int || int_value(p, *pp, &v, &u) != 0)
            DECLINE(d, "not an integer of the column's range");
        if (c->kind == K_I64)
            ((int64_t *)c->values)[row] = v;
        else if (c->kind == K_I32) {
            if (v < INT32_MIN || v > INT32_MAX)
                DECLINE(d, "not an integer of the column's range");
            ((int32_t *)c->values)[row] = (int32_t)v;
        } else if (c->kind == K_I16) {
            if (v < INT16_MIN || v > INT16_MAX)
                DECLINE(d, "not an integer of the column's range");
            ((int16_t *)c->values)[row] = (int16_t)v;
        } else {
            if (v < INT8_MIN || v > INT8_MAX)
                DECLINE(d, "not an integer of the column's range");
            ((int8_t *)c->values)[row] = (int8_t)v;
        }
        break;
    }
    case K_F64:
        if (parse_double(d, pp, end, &((double *)c->values)[row]) < 0)
            return -1;
        break;
    case K_BOOL:
        if (*p == 't') {
            if (expect_literal(d, pp, end, "true", 4) < 0)
                return -1;
            set_bit(c->values, row);
        } else if (expect_literal(d, pp, end, "false", 5) < 0)
            return -1;
        break;
    case K_TS:
        if (*p != '"')
            DECLINE(d, "a timestamp column holds another JSON type");
        if (parse_timestamp(d, pp, end, &((int64_t *)c->values)[row]) < 0)
            return -1;
        break;
    }
    set_bit(c->valid, row);
    return 0;
}

static void *grow_zeroed(void *p, size_t old, size_t new) {
    uint8_t *q = realloc(p, new);
    if (q != NULL)
        memset(q + old, 0, new - old);
    return q;
}

/* Doubles the rows every column's buffers hold. */
static int grow(Decoder *d) {
    size_t old = (size_t)d->capacity, cap = old * 2;
    for (Py_ssize_t i = 0; i < d->ncols; i++) {
        Column *c = &d->cols[i];
        void *q = grow_zeroed(c->valid, (old + 7) / 8, (cap + 7) / 8);
        if (q == NULL)
            return -1;
        c->valid = q;
        if (c->kind == K_STRING)
            q = grow_zeroed(c->offsets, (old + 1) * 4, (cap + 1) * 4);
        else if (c->kind == K_BOOL)
            q = grow_zeroed(c->values, (old + 7) / 8, (cap + 7) / 8);
        else
            q = grow_zeroed(c->values, old * (size_t)c->width, cap * (size_t)c->width);
        if (q == NULL)
            return -1;
        if (c->kind == K_STRING)
            c->offsets = q;
        else
            c->values = q;
    }
    d->capacity = (int64_t)cap;
    return 0;
}

static inline int same_bytes(const uint8_t *a, const char *b, size_t n) {
    while (n >= 8) {
        uint64_t x, y;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        if (x != y)
            return 0;
        a += 8, b += 8, n -= 8;
    }
    while (n--)
        if (*a++ != (uint8_t)*b++)
            return 0;
    return 1;
}

static inline Column *find_column(Decoder *d, const uint8_t *key, size_t n) {
    Py_ssize_t k = d->ncols;
    for (Py_ssize_t i = 0, j = d->hint; i < k; i++, j++) {
        if (j >= k)
            j = 0;
        Column *c = &d->cols[j];
        if (c->nlen == n && same_bytes(key, c->name, n)) {
            d->hint = j + 1;
            return c;
        }
    }
    return NULL;
}

/* The key whose opening quote is at key - 1: the column it names (NULL when none) and, in *after,
 * the byte after its closing quote. The expected column (the one after the last matched) is tried
 * first by comparing its name in place; a name holding no quote, backslash or control byte can only
 * match a key spelt exactly so. */
static int read_key(Decoder *d, const uint8_t *key, const uint8_t *end, Column **col, const uint8_t **after) {
    if (d->hint < d->ncols) {
        Column *c = &d->cols[d->hint];
        if (c->plain_name && (size_t)(end - key) > c->nlen && key[c->nlen] == '"' && same_bytes(key, c->name, c->nlen)) {
            d->hint++;
            *col = c;
            *after = key + c->nlen + 1;
            return 0;
        }
    }
    const uint8_t *k = key;
    while (k < end && *k != '"' && *k != '\\' && *k >= 0x20)
        k++;
    if (k >= end || *k != '"')
        DECLINE(d, "a key with an escape or a control character");
    for (const uint8_t *q = key; q < k;) {
        if (*q < 0x80) {
            q++;
            continue;
        }
        int n = utf8_len(q, k);
        if (n == 0)
            DECLINE(d, "invalid UTF-8");
        q += n;
    }
    *col = find_column(d, key, (size_t)(k - key));
    *after = k + 1;
    return 0;
}

/* One line's object at *pp (its first byte not blank): one row; *pp ends at the line's newline or
 * the end of the data. A newline inside the object is never valid here (a string declines on it as
 * a control byte, a value or a separator as not JSON), so the object's parse finds the line's end. */
static int decode_line(Decoder *d, const uint8_t **pp, const uint8_t *end) {
    const uint8_t *p = *pp;
    int64_t row = d->row;
    if (row == d->capacity && grow(d) < 0)
        DECLINE(d, "out of memory");
    if (*p != '{')
        DECLINE(d, "a line is not a JSON object");
    d->hint = 0;
    p = skip_ws(p + 1, end);
    if (p < end && *p == '}')   /* DuckDB reads {} as the value of a lone column: leave it to DuckDB */
        DECLINE(d, "an empty object");
    for (;;) {
        Column *c;
        if (p >= end || *p != '"')
            DECLINE(d, "an object key is not a string");
        if (read_key(d, p + 1, end, &c, &p) < 0)
            return -1;
        p = skip_ws(p, end);
        if (p >= end || *p != ':')
            DECLINE(d, "no colon after a key");
        p = skip_ws(p + 1, end);
        if (c != NULL) {
            if (c->seen == row)
                DECLINE(d, "a declared key given twice");
            c->seen = row;
            if (parse_value(d, c, &p, end) < 0)
                return -1;
        } else if (skip_value(d, &p, end, 1) < 0)
            return -1;
        p = skip_ws(p, end);
        if (p < end && *p == ',') {
            p = skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        DECLINE(d, "an object does not close");
    }
    p = skip_ws(p, end);
    if (p != end && *p != '\n')
        DECLINE(d, "more than one value on a line");
    for (Py_ssize_t i = 0; i < d->ncols; i++) {
        Column *c = &d->cols[i];
        if (c->seen != row) {
            c->nulls++;
            if (c->kind == K_STRING)
                c->offsets[row + 1] = (int32_t)c->clen;
        }
    }
    d->row++;
    *pp = p;
    return 0;
}

static int decode_all(Decoder *d, const uint8_t *data, size_t size) {
    const uint8_t *p = data, *stop = data + size;
    if (size >= 3 && data[0] == 0xEF && data[1] == 0xBB && data[2] == 0xBF)
        p += 3;
    d->line = 0;
    while (p < stop) {
        const uint8_t *begin = p;
        d->line++;
        p = skip_ws(p, stop);
        if (p < stop && *p != '\n') {
            if (decode_line(d, &p, stop) < 0)
                return -1;
            if ((size_t)(p - begin) > MAX_LINE)
                DECLINE(d, "a line over read_json's maximum object size");
        }
        if (p < stop)
            p++;   /* the newline */
    }
    return 0;
}

static int column_width(int kind) {
    switch (kind) {
    case K_I8: return 1;
    case K_I16: return 2;
    case K_I32: return 4;
    case K_I64: case K_F64: case K_TS: return 8;
    default: return 0;
    }
}

static void free_columns(Column *cols, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        free(cols[i].valid);
        free(cols[i].values);
        free(cols[i].offsets);
        free(cols[i].chars);
    }
    free(cols);
}

static locale_t c_locale;

static PyObject *decode(PyObject *self, PyObject *args) {
    Py_buffer data;
    PyObject *fields, *seq = NULL, *result = NULL, *columns = NULL;
    Column *cols = NULL;
    Py_ssize_t ncols = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*O:decode", &data, &fields))
        return NULL;
    seq = PySequence_Fast(fields, "fields must be a sequence of (name, kind)");
    if (seq == NULL)
        goto done;
    ncols = PySequence_Fast_GET_SIZE(seq);
    const uint8_t *bytes = data.buf;
    size_t size = (size_t)data.len;
    /* rows: a first guess from the size (grown by decode_line when a file has shorter lines) */
    size_t lines = size / 48 + 64;
    cols = calloc((size_t)(ncols ? ncols : 1), sizeof(Column));
    if (cols == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < ncols; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        const char *name;
        Py_ssize_t nlen;
        int kind;
        if (!PyArg_ParseTuple(item, "y#i:field", &name, &nlen, &kind))
            goto done;
        if (kind < 0 || kind > K_LAST) {
            PyErr_Format(PyExc_ValueError, "unknown kind %d", kind);
            goto done;
        }
        Column *c = &cols[i];
        c->name = name;   /* borrowed from fields, which outlives the call */
        c->nlen = (size_t)nlen;
        c->plain_name = 1;
        for (Py_ssize_t j = 0; j < nlen; j++)
            if (name[j] == '"' || name[j] == '\\' || (uint8_t)name[j] < 0x20)
                c->plain_name = 0;
        c->kind = kind;
        c->width = column_width(kind);
        c->seen = -1;
        c->valid = calloc((lines + 7) / 8, 1);
        if (kind == K_STRING)
            c->offsets = calloc(lines + 1, sizeof(int32_t));
        else if (kind == K_BOOL)
            c->values = calloc((lines + 7) / 8, 1);
        else
            c->values = calloc(lines, (size_t)c->width);
        if (c->valid == NULL || (kind == K_STRING ? c->offsets == NULL : c->values == NULL)) {
            PyErr_NoMemory();
            goto done;
        }
    }
    Decoder d = {cols, ncols, 0, 0, NULL, 0, c_locale, (int64_t)lines};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = decode_all(&d, bytes, size);
    Py_END_ALLOW_THREADS
    if (rc < 0) {
        result = PyUnicode_FromFormat("line %lld: %s", (long long)d.line, d.why);
        goto done;
    }
    int64_t rows = d.row;
    columns = PyList_New(ncols);
    if (columns == NULL)
        goto done;
    for (Py_ssize_t i = 0; i < ncols; i++) {
        Column *c = &cols[i];
        PyObject *valid, *values, *offsets;
        if (c->nulls) {
            valid = buffer_new(c->valid, (Py_ssize_t)((rows + 7) / 8));
        } else {
            free(c->valid);
            valid = Py_None;
            Py_INCREF(valid);
        }
        c->valid = NULL;
        if (valid == NULL)
            goto done;
        if (c->kind == K_STRING) {
            values = buffer_new(c->chars, (Py_ssize_t)c->clen);
            c->chars = NULL;
            offsets = buffer_new(c->offsets, (Py_ssize_t)((rows + 1) * 4));
            c->offsets = NULL;
        } else {
            values = buffer_new(c->values, c->kind == K_BOOL ? (Py_ssize_t)((rows + 7) / 8) : (Py_ssize_t)(rows * c->width));
            c->values = NULL;
            offsets = Py_None;
            Py_INCREF(offsets);
        }
        if (values == NULL || offsets == NULL) {
            Py_XDECREF(values);
            Py_XDECREF(offsets);
            Py_DECREF(valid);
            goto done;
        }
        PyObject *t = Py_BuildValue("(LNNN)", (long long)c->nulls, valid, values, offsets);
        if (t == NULL)
            goto done;
        PyList_SET_ITEM(columns, i, t);
    }
    result = Py_BuildValue("(LO)", (long long)rows, columns);
done:
    Py_XDECREF(columns);
    if (cols != NULL)
        free_columns(cols, ncols);
    Py_XDECREF(seq);
    PyBuffer_Release(&data);
    return result;
}

static PyMethodDef methods[] = {
    {"decode", decode, METH_VARARGS,
     "decode(data, fields) -> (rows, columns) | str: flat JSON lines into Arrow buffers, or the reason of a decline"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_flatjson", "A decoder of flat JSON lines into Arrow buffers (see decode).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__flatjson(void) {
    init_tables();
    if (c_locale == (locale_t)0) {
        c_locale = newlocale(LC_ALL_MASK, "C", (locale_t)0);
        if (c_locale == (locale_t)0)
            return PyErr_NoMemory();
    }
    if (PyType_Ready(&BufferType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "STRING", K_STRING) < 0 || PyModule_AddIntConstant(m, "INT8", K_I8) < 0
        || PyModule_AddIntConstant(m, "INT16", K_I16) < 0 || PyModule_AddIntConstant(m, "INT32", K_I32) < 0
        || PyModule_AddIntConstant(m, "INT64", K_I64) < 0 || PyModule_AddIntConstant(m, "FLOAT64", K_F64) < 0
        || PyModule_AddIntConstant(m, "BOOL", K_BOOL) < 0 || PyModule_AddIntConstant(m, "TIMESTAMP", K_TS) < 0)
        return NULL;
    Py_INCREF(&BufferType);
    if (PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0)
        return NULL;
    return m;
}
