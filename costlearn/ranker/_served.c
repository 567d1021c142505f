/* costlearn's served path in C: a CPython extension module built by the
 * package build (setup.py), loaded by costlearn/ranker/native_library.py
 * (served_module), optional: where it was not built (no compiler or Python
 * headers at install) everything here has its Python twin, which gives
 * the same answers (tests/serve/test_predict.py, tests/ranker/test_shortlist.py).
 *
 *   Served(*, ranker, ...)
 *       one model's unseen problems under one floor (Answers.served): ranked with
 *       the C ranker's costlearn_rank_query in this thread's context (the GIL
 *       released), and where the floor's decision is plain (nothing for the
 *       vendor policy to do) answered here: the Prediction and the words of
 *       its reasons (Envelope.reasons, OODVerdict.level_symptom), as
 *       Answers.answer makes them; any other decision goes to Python
 *       (Answers.finish) with the ranking's RankResult. Answers are kept in
 *       Answers.results.
 *
 *   entry(function, predictors_get, store_key, doc, watch, watch_every_s)
 *       a builtin with `function`'s signature (predict_best's, checked) that
 *       answers a plain call of a loaded predictor with its Served (its
 *       answer cache, else a ranking: predict_best's own way, in C), and
 *       hands every other call, unchanged, to `function` (the Python
 *       predict_best, which computes, checks and stores).
 *
 * The entry finds the predictor by the names as given ((device, family,
 * dtype), models_dir by its store's key: costlearn.model.store.store_key;
 * None and an absolute POSIX str are their own, as there), only for a "plain"
 * call (int extents and top_k, str names, device None or str, models_dir
 * None, a str or another object store_key takes, no option set). It saves a
 * Python function call of 14 parameters and its checks
 * (python -m benchmarks.predict, "repeated"). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#ifdef _WIN32
#include <windows.h>
#else
#include <time.h>
#endif

#include "costlearn_structs.h"

/* predict_best's parameters, in the order of its signature (entry checks the function's code against it) */
enum { P_M, P_N, P_K, P_DTYPE, P_DEVICE, P_FAMILY, P_LAYOUT, P_TOP_K, P_MODELS_DIR, P_RUNNING_ON,
       P_MEASURE_TOP_K, P_BACKEND, P_TUNING_DB, P_EPILOGUE, N_PARAMS };

static const char *const PARAM_NAMES[N_PARAMS] = {
    "M", "N", "K", "dtype", "device", "family", "layout", "top_k", "models_dir", "running_on", "measure_top_k",
    "backend", "tuning_db", "epilogue"};

typedef struct {
    PyObject *function;             /* the Python predict_best */
    PyObject *names[N_PARAMS];      /* interned parameter names */
    PyObject *defaults[N_PARAMS];   /* NULL: none (required) */
    Py_ssize_t n_positional;        /* how many may be given by position */
    PyObject *doc;                  /* bytes: the builtin's ml_doc points into it */
    PyObject *predictors_get;       /* PREDICTORS.get */
    PyObject *store_key;            /* costlearn.model.store.store_key */
    PyObject *served_name;          /* "served": Predictor.served, its Answers' served path */
    PyObject *watch;                /* PREDICTORS.watch: the staleness rule (LoadedModels.watch) */
    double watch_every_s;           /* how often a call runs it */
    double next_watch_s;            /* the monotonic clock's second after which the next call does (its own
                                     * clock, not LoadedModels.next_watch_s: no attribute read per call) */
} entry_state;

/* One per process: entry() replaces it (a reloaded module); the builtin it made before then answers with the
 * new state, the same function's. */
static entry_state STATE;

static inline int exact_str_or_none(PyObject *v) { return v == Py_None || PyUnicode_CheckExact(v); }

/* Seconds of a monotonic clock (the one time.monotonic reads on Linux). */
static double monotonic_s(void)
{
#ifdef _WIN32
    return (double)GetTickCount64() / 1000.0;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
#endif
}

/* models_dir's store key (a new reference), as st->store_key gives it: None and an absolute POSIX
 * str are their own (its shortcut, without a call); any other object is its (a relative path's names the working
 * folder: a getcwd, a microsecond on this project's VM). NULL with an error set where it has none; a str subclass
 * is not plain: NULL with no error. */
static PyObject *store_of(entry_state *st, PyObject *models_dir)
{
    if (models_dir == Py_None)
        return Py_NewRef(models_dir);
    if (PyUnicode_CheckExact(models_dir)) {
#ifndef _WIN32
        if (PyUnicode_GET_LENGTH(models_dir) > 0 && PyUnicode_READ_CHAR(models_dir, 0) == '/')
            return Py_NewRef(models_dir);
#endif
    } else if (PyUnicode_Check(models_dir)) {
        return NULL;
    }
    return PyObject_CallOneArg(st->store_key, models_dir);
}


/* ---- Served: one predictor's unseen problem, ranked and answered in C ------------------------------------ */

#define OUTSIDE 2          /* decision bits: costlearn/ranker/base.py (DECISION_*) */
#define UNSURE 4
#define WORDED (OUTSIDE | UNSURE)
#define PLAIN (1 | 1 << 6) /* DECISION_PLAIN: decided, nothing flagged, the ranking's best tile config first */
#define N_PREDICTION 22    /* Prediction's fields */
#define N_RANKRESULT 11    /* RankResult's fields */

typedef int32_t (*rank_query_fn)(costlearn_ctx *);

typedef struct {
    PyObject_HEAD
    PyObject *ranker;          /* NativeRanker: keeps the model's arrays alive */
    PyObject *tls;             /* its thread_contexts */
    PyObject *context;         /* its bound context(layout, epilogue) */
    rank_query_fn rank;
    int mode, top_more, estimate, vendor, says_nothing;
    long long max_extent;
    Py_ssize_t cache_size;
    PyObject *configs;         /* tuple */
    PyObject *dtype, *family, *device, *layouts, *epilogues;
    PyObject *margin, *nan;    /* the Python floats the Prediction holds (the same objects as Python's path) */
    PyObject *results;         /* dict: the predictor's answers by (m, n, k, layout, top_k, epilogue) */
    PyObject *finish;          /* callable (m, n, k, layout, epilogue, top_k, RankResult) -> Prediction, cached */
    PyObject *prediction_type, *rankresult_type, *estimate_type;
    PyObject *predicted;       /* "predicted" */
    PyObject *by_layout_name;  /* "by_layout" */
    /* the reasons' words (Envelope.reason_parts, OODVerdict.level_parts) */
    double env_lo[3], env_hi[3], env_threshold;
    PyObject *env_min, *env_max;            /* tuples of 3 ints: the trained minimum and maximum */
    PyObject *shape_text, *density_tail;    /* list of str; str */
    PyObject *level_head[3], *level_tail[3];   /* by level (NULL: no words: None) */
} Served;

static void served_dealloc(Served *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->ranker); Py_CLEAR(self->tls); Py_CLEAR(self->context); Py_CLEAR(self->configs);
    Py_CLEAR(self->dtype); Py_CLEAR(self->family); Py_CLEAR(self->device); Py_CLEAR(self->layouts);
    Py_CLEAR(self->epilogues); Py_CLEAR(self->margin); Py_CLEAR(self->nan); Py_CLEAR(self->results);
    Py_CLEAR(self->finish); Py_CLEAR(self->prediction_type); Py_CLEAR(self->rankresult_type);
    Py_CLEAR(self->estimate_type); Py_CLEAR(self->predicted); Py_CLEAR(self->by_layout_name);
    Py_CLEAR(self->env_min); Py_CLEAR(self->env_max); Py_CLEAR(self->shape_text); Py_CLEAR(self->density_tail);
    for (int i = 0; i < 3; i++) {
        Py_CLEAR(self->level_head[i]);
        Py_CLEAR(self->level_tail[i]);
    }
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int served_traverse(Served *self, visitproc visit, void *arg)
{
    Py_VISIT(self->ranker); Py_VISIT(self->tls); Py_VISIT(self->context); Py_VISIT(self->configs);
    Py_VISIT(self->results); Py_VISIT(self->finish); Py_VISIT(self->prediction_type);
    Py_VISIT(self->rankresult_type); Py_VISIT(self->estimate_type);
    return 0;
}

static int served_clear(Served *self)
{
    Py_CLEAR(self->ranker); Py_CLEAR(self->tls); Py_CLEAR(self->context); Py_CLEAR(self->configs);
    Py_CLEAR(self->results); Py_CLEAR(self->finish);
    return 0;
}

/* A tuple subclass (a named tuple) of n items, stolen from items (NULL: an error set, the items released). */
static PyObject *named_tuple(PyObject *type, PyObject **items, Py_ssize_t n)
{
    PyObject *t = ((PyTypeObject *)type)->tp_alloc((PyTypeObject *)type, n);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (t == NULL || items[i] == NULL) {
            for (Py_ssize_t j = i; j < n; j++)
                Py_XDECREF(items[j]);
            Py_XDECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, items[i]);
    }
    return t;
}

/* This thread's context for (layout, epilogue): the ranker's, made by its context() where there is none yet. */
static costlearn_ctx *served_context(Served *self, PyObject *layout, PyObject *epilogue)
{
    PyObject *key = PyTuple_Pack(2, layout, epilogue), *ctx = NULL, *made = NULL;
    if (key == NULL)
        return NULL;
    PyObject *by_layout = PyObject_GetAttr(self->tls, self->by_layout_name);
    if (by_layout != NULL && PyDict_Check(by_layout))
        ctx = PyDict_GetItemWithError(by_layout, key);          /* borrowed */
    Py_XDECREF(by_layout);                                        /* the local still holds it */
    Py_DECREF(key);
    if (ctx == NULL) {
        PyErr_Clear();
        ctx = made = PyObject_CallFunctionObjArgs(self->context, layout, epilogue, NULL);
        if (ctx == NULL)
            return NULL;
    }
    costlearn_ctx *out = NULL;
    if (PyTuple_Check(ctx) && PyTuple_GET_SIZE(ctx) > 0)
        out = (costlearn_ctx *)PyLong_AsVoidPtr(PyTuple_GET_ITEM(ctx, PyTuple_GET_SIZE(ctx) - 1));
    if (out == NULL && !PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "the ranker's context has no address");
    Py_XDECREF(made);                                             /* the thread's by_layout keeps it */
    return out;
}

/* 2.0 ** x as Python computes it for a finite x: libm's pow; 0 where the result is not finite (Python raises
 * or special-cases: its path answers then). */
static int pow2(double x, double *out)
{
    if (!isfinite(x))
        return 0;
    *out = x == 0.0 ? 1.0 : pow(2.0, x);
    return isfinite(*out);
}


/* Append text to list, stealing it (NULL: an error set). */
static int append_text(PyObject *list, PyObject *text)
{
    if (text == NULL)
        return -1;
    int r = PyList_Append(list, text);
    Py_DECREF(text);
    return r;
}

/* format(x, ".2f") as Python writes it, as a str. */
static PyObject *text_2f(double x)
{
    char *text = PyOS_double_to_string(x, 'f', 2, 0, NULL);
    if (text == NULL)
        return NULL;
    PyObject *out = PyUnicode_FromString(text);
    PyMem_Free(text);
    return out;
}

/* Answers._words of the decided ranking in ctx, in C, for a decision not flagged unsure: Envelope.reasons
 * (outside) and OODVerdict.level_symptom (the level); the same words (tests hold them equal). A tuple. */
static PyObject *served_words(Served *self, costlearn_ctx *ctx, int32_t bits)
{
    PyObject *list = PyList_New(0);
    long long q[3] = {ctx->q_m, ctx->q_n, ctx->q_k};
    if (list == NULL)
        return NULL;
    if (bits & OUTSIDE) {
        double dist = sqrt(ctx->nearest_d2);
        int within = 1;
        for (int i = 0; i < 3; i++)
            within &= self->env_lo[i] <= (double)q[i] && (double)q[i] <= self->env_hi[i];
        if (!(within && dist <= self->env_threshold)) {
            for (int i = 0; i < 3 && !within; i++) {
                if ((double)q[i] < self->env_lo[i]) {
                    if (append_text(list, PyUnicode_FromFormat("%c=%lld below the trained minimum %S", "MNK"[i], q[i],
                                                               PyTuple_GET_ITEM(self->env_min, i))) < 0)
                        goto fail;
                } else if ((double)q[i] > self->env_hi[i]) {
                    if (append_text(list, PyUnicode_FromFormat("%c=%lld above the trained maximum %S", "MNK"[i], q[i],
                                                               PyTuple_GET_ITEM(self->env_max, i))) < 0)
                        goto fail;
                }
            }
            if (dist > self->env_threshold) {
                PyObject *d = text_2f(dist);
                if (d == NULL || ctx->nearest < 0 || ctx->nearest >= PyList_GET_SIZE(self->shape_text)) {
                    Py_XDECREF(d);
                    if (!PyErr_Occurred())
                        PyErr_SetString(PyExc_IndexError, "Served: the nearest training shape is out of range");
                    goto fail;
                }
                int r = append_text(list, PyUnicode_FromFormat("nearest trained shape %S is %U doublings away%U",
                                                               PyList_GET_ITEM(self->shape_text, ctx->nearest), d,
                                                               self->density_tail));
                Py_DECREF(d);
                if (r < 0)
                    goto fail;
            }
        }
    }
    if (ctx->level) {
        int level = ctx->level;
        if (level > 0 && level < 3 && self->level_head[level] != NULL) {
            if (append_text(list, PyUnicode_FromFormat("%U%lldx%lldx%lld%U", self->level_head[level], q[0], q[1], q[2],
                                                       self->level_tail[level])) < 0)
                goto fail;
        } else if (PyList_Append(list, Py_None) < 0) {
            goto fail;
        }
    }
    PyObject *out = PyList_AsTuple(list);
    Py_DECREF(list);
    return out;
fail:
    Py_DECREF(list);
    return NULL;
}

/* The RankResult of the ranking in ctx (NativeRanker._ranked's). */
static PyObject *rank_result(Served *self, costlearn_ctx *ctx, int32_t got)
{
    PyObject *order = PyList_New(got), *scores = PyList_New(got);
    if (order == NULL || scores == NULL)
        goto fail;
    for (int32_t i = 0; i < got; i++) {
        PyObject *a = PyLong_FromLong(ctx->out_index[i]), *b = PyFloat_FromDouble(ctx->out_score[i]);
        if (a == NULL || b == NULL) {
            Py_XDECREF(a);
            Py_XDECREF(b);
            goto fail;
        }
        PyList_SET_ITEM(order, i, a);
        PyList_SET_ITEM(scores, i, b);
    }
    PyObject *est = Py_None, *decision = Py_None;
    Py_INCREF(Py_None);
    Py_INCREF(Py_None);
    if (self->estimate) {
        PyObject *e[2] = {PyFloat_FromDouble(ctx->v_mean), PyFloat_FromDouble(ctx->v_sd)};
        Py_DECREF(est);
        est = named_tuple(self->estimate_type, e, 2);
    }
    if (ctx->decision) {
        Py_DECREF(decision);
        decision = Py_BuildValue("(id)", (int)ctx->decision, ctx->v_score);
    }
    PyObject *items[N_RANKRESULT] = {
        order, scores, PyLong_FromLong(ctx->nearest), PyFloat_FromDouble(sqrt(ctx->nearest_d2)),
        PyBool_FromLong(ctx->fits != 0), PyLong_FromLong(ctx->level), PyFloat_FromDouble(expm1(ctx->vendor_near)),
        PyFloat_FromDouble(expm1(ctx->model_near)), PyBool_FromLong(ctx->used_table != 0), est, decision};
    return named_tuple(self->rankresult_type, items, N_RANKRESULT);
fail:
    Py_XDECREF(order);
    Py_XDECREF(scores);
    return NULL;
}

/* The Prediction of a plain decision (Answers.answer's first return, Answers._made), reasons stolen; NULL
 * without an error set where a time is not finite (the Python path then answers). */
static PyObject *plain_prediction(Served *self, costlearn_ctx *ctx, int32_t got, PyObject *m, PyObject *n,
                                  PyObject *k, PyObject *layout, PyObject *epilogue, long long top_k,
                                  PyObject *reasons)
{
    Py_ssize_t n_top = top_k < got ? (Py_ssize_t)top_k : got;
    double t, ratio = 0.0, band[3] = {0.0, 0.0, 0.0};
    PyObject *top = NULL;
    if (n_top < 1)
        goto no;
    if (self->vendor) {
        if (!pow2(ctx->out_score[0] - ctx->v_score, &ratio))
            goto no;
        if (self->estimate && !(pow2(ctx->v_mean, &band[0]) && pow2(ctx->v_mean - 2.0 * ctx->v_sd, &band[1])
                                && pow2(ctx->v_mean + 2.0 * ctx->v_sd, &band[2])))
            goto no;
    }
    top = PyTuple_New(n_top);
    if (top == NULL)
        goto fail;
    for (Py_ssize_t i = 0; i < n_top; i++) {
        int32_t c = ctx->out_index[i];
        if (!pow2(ctx->out_score[i], &t) || c < 0 || c >= PyTuple_GET_SIZE(self->configs))
            goto no;
        PyObject *cfg = PyTuple_GET_ITEM(self->configs, c);
        Py_INCREF(cfg);
        PyObject *pair = PyTuple_New(2), *time_us = PyFloat_FromDouble(t);
        if (pair == NULL || time_us == NULL) {
            Py_XDECREF(pair);
            Py_XDECREF(time_us);
            Py_DECREF(cfg);
            goto fail;
        }
        PyTuple_SET_ITEM(pair, 0, cfg);
        PyTuple_SET_ITEM(pair, 1, time_us);
        PyTuple_SET_ITEM(top, i, pair);
    }
    PyObject *best = PyTuple_GET_ITEM(top, 0);
    PyObject *ratio_obj, *band_obj;
    if (!self->vendor) {
        ratio_obj = self->nan;
        Py_INCREF(ratio_obj);
        band_obj = PyTuple_New(0);
    } else {
        ratio_obj = PyFloat_FromDouble(ratio);
        band_obj = self->estimate ? Py_BuildValue("(ddd)", band[0], band[1], band[2]) : PyTuple_New(0);
    }
    PyObject *items[N_PREDICTION] = {
        PyTuple_GET_ITEM(best, 0), PyTuple_GET_ITEM(best, 1), top, PyBool_FromLong(PyTuple_GET_SIZE(reasons) > 0),
        reasons, m, n, k, self->dtype, layout, self->family, self->device, self->predicted, ratio_obj, self->margin,
        PyTuple_New(0), PyBool_FromLong(0), PyTuple_New(0), PyUnicode_New(0, 0), epilogue, band_obj,
        PyUnicode_New(0, 0)};
    /* borrowed ones made owned */
    Py_INCREF(items[0]); Py_INCREF(items[1]); Py_INCREF(m); Py_INCREF(n); Py_INCREF(k); Py_INCREF(self->dtype);
    Py_INCREF(layout); Py_INCREF(self->family); Py_INCREF(self->device); Py_INCREF(self->predicted);
    Py_INCREF(self->margin); Py_INCREF(epilogue);
    return named_tuple(self->prediction_type, items, N_PREDICTION);
no:
    Py_XDECREF(top);
    Py_DECREF(reasons);
    return NULL;
fail:
    Py_XDECREF(top);
    Py_DECREF(reasons);
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    return NULL;
}

/* Rank the problem and answer it: a plain decision here, any other by self->finish (Python); the answer
 * stored in self->results. m, n, k: checked ints in [1, max_extent]; top_k an int >= 1. */
static PyObject *served_answer(Served *self, PyObject *m, PyObject *n, PyObject *k, PyObject *layout,
                               PyObject *epilogue, PyObject *top_k_obj, PyObject *key)
{
    int overflow = 0;
    long long top_k = PyLong_AsLongLongAndOverflow(top_k_obj, &overflow);
    if (overflow || top_k > INT32_MAX)
        top_k = INT32_MAX;
    long long top = top_k + self->top_more;
    costlearn_ctx *ctx = served_context(self, layout, epilogue);
    if (ctx == NULL)
        return NULL;
    ctx->q_m = PyLong_AsLongLong(m);
    ctx->q_n = PyLong_AsLongLong(n);
    ctx->q_k = PyLong_AsLongLong(k);
    ctx->q_mask = NULL;
    ctx->q_top = (int32_t)(top < INT32_MAX ? top : INT32_MAX);
    ctx->q_mode = self->mode;
    int32_t got;
    Py_BEGIN_ALLOW_THREADS                                  /* as ctypes' call did: other threads run meanwhile */
    got = self->rank(ctx);                                  /* (ctx is this thread's, the model's arrays read-only) */
    Py_END_ALLOW_THREADS
    /* The ranking read from a copy taken before any Python runs: the interpreter runs a pending signal handler
     * at its next call, and one that predicts on this thread reuses ctx (its outputs would answer this problem). */
    size_t kept = got > 0 ? (size_t)got : 0;
    costlearn_ctx snap = *ctx;
    int32_t *index = PyMem_Malloc((kept ? kept : 1) * sizeof(int32_t));
    double *score = PyMem_Malloc((kept ? kept : 1) * sizeof(double));
    PyObject *answer = NULL;
    if (index == NULL || score == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    memcpy(index, ctx->out_index, kept * sizeof(int32_t));
    memcpy(score, ctx->out_score, kept * sizeof(double));
    snap.out_index = index;
    snap.out_score = score;
    ctx = &snap;
    int32_t bits = ctx->decision;
    /* a plain decision, unless flagged unsure (rare: a floor sends such a problem to the vendor where it has
     * one; Python words it) */
    if (bits != 0 && (bits & ~WORDED) == PLAIN && !(bits & UNSURE) && self->says_nothing) {
        PyObject *reasons = bits & WORDED || ctx->level ? served_words(self, ctx, bits) : PyTuple_New(0);
        if (reasons == NULL)
            goto done;
        answer = plain_prediction(self, ctx, got, m, n, k, layout, epilogue, top_k, reasons);
        if (answer == NULL && PyErr_Occurred())
            goto done;
    }
    if (answer == NULL) {                                   /* the Python path: it stores the answer itself */
        PyObject *res = rank_result(self, ctx, got);
        if (res != NULL) {
            answer = PyObject_CallFunctionObjArgs(self->finish, m, n, k, layout, epilogue, top_k_obj, res, NULL);
            Py_DECREF(res);
        }
        goto done;
    }
    if (PyDict_GET_SIZE(self->results) >= self->cache_size)
        PyDict_Clear(self->results);
    if (PyDict_SetItem(self->results, key, answer) != 0)
        Py_CLEAR(answer);
done:
    PyMem_Free(index);
    PyMem_Free(score);
    return answer;
}

static long long extent(PyObject *v, long long max)
{
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return overflow || x < 1 || x > max ? -1 : x;
}

/* Whether top_k (an int) is >= 1: any larger than a long long is (the ranking is cut at the candidates). */
static int top_k_ok(PyObject *v)
{
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    return overflow > 0 || (overflow == 0 && x >= 1);
}

/* Whether the arguments are a problem this model serves: int extents in [1, max_extent], top_k an int >= 1, a
 * layout and epilogue of the model's and (where given) its dtype (predict_best's conditions for
 * Predictor.predict_shape). -1: an error set. */
static int served_takes(Served *self, PyObject *m, PyObject *n, PyObject *k, PyObject *dtype, PyObject *layout,
                        PyObject *epilogue, PyObject *top_k)
{
    if (!(PyLong_Check(m) && PyLong_Check(n) && PyLong_Check(k) && PyLong_Check(top_k) && PyUnicode_Check(layout)
          && PyUnicode_Check(epilogue))
        || extent(m, self->max_extent) < 0 || extent(n, self->max_extent) < 0 || extent(k, self->max_extent) < 0
        || !top_k_ok(top_k))
        return 0;
    int r = dtype == NULL || PyUnicode_Compare(dtype, self->dtype) == 0;
    if (r && (r = PySequence_Contains(self->layouts, layout)) == 1)
        r = PySequence_Contains(self->epilogues, epilogue);
    return r;
}

/* Served.predict(m, n, k, layout, epilogue, top_k): Predictor.predict_shape's answer for checked arguments
 * (ints in range, a layout and epilogue of the model): the cached one, or a new one, cached. */
static PyObject *served_predict(Served *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError, "Served.predict takes (m, n, k, layout, epilogue, top_k)");
        return NULL;
    }
    if (self->rank == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Served is not initialised");
        return NULL;
    }
    int takes = served_takes(self, args[0], args[1], args[2], NULL, args[3], args[4], args[5]);
    if (takes != 1) {
        if (takes == 0)
            PyErr_Format(PyExc_ValueError, "Served.predict(%R, %R, %R, %R, %R, %R): not a checked problem of this "
                         "model (int extents in [1, %lld], one of its layouts and epilogues, top_k >= 1)", args[0],
                         args[1], args[2], args[3], args[4], args[5], self->max_extent);
        return NULL;
    }
    PyObject *key = PyTuple_Pack(6, args[0], args[1], args[2], args[3], args[5], args[4]);
    if (key == NULL)
        return NULL;
    PyObject *hit = PyDict_GetItemWithError(self->results, key);
    if (hit != NULL) {
        Py_INCREF(hit);
        Py_DECREF(key);
        return hit;
    }
    PyObject *out = PyErr_Occurred() ? NULL : served_answer(self, args[0], args[1], args[2], args[3], args[4],
                                                           args[5], key);
    Py_DECREF(key);
    return out;
}

/* Served.predict_many(shapes, top_k): Served.predict of each checked (m, n, k, layout, epilogue) tuple of the list
 * shapes, in order, as a list (a repeat answered from the cache the first one filled). */
static PyObject *served_predict_many(Served *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "Served.predict_many takes (a list of (m, n, k, layout, epilogue), top_k)");
        return NULL;
    }
    PyObject *shapes = args[0];
    Py_ssize_t n = PyList_GET_SIZE(shapes);
    PyObject *out = PyList_New(n);
    if (out == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *s = PyList_GET_ITEM(shapes, i);
        if (!PyTuple_Check(s) || PyTuple_GET_SIZE(s) != 5) {
            PyErr_Format(PyExc_TypeError, "Served.predict_many: shapes[%zd] is not an (m, n, k, layout, epilogue) "
                         "tuple", i);
            Py_DECREF(out);
            return NULL;
        }
        PyObject *a[6] = {PyTuple_GET_ITEM(s, 0), PyTuple_GET_ITEM(s, 1), PyTuple_GET_ITEM(s, 2),
                          PyTuple_GET_ITEM(s, 3), PyTuple_GET_ITEM(s, 4), args[1]};
        PyObject *answer = served_predict(self, a, 6);
        if (answer == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, answer);
    }
    return out;
}

static int served_words_init(Served *self, PyObject *envelope, PyObject *levels)
{
    PyObject *lo, *hi, *mins, *maxs, *texts, *tail;
    double threshold;
    if (!PyArg_ParseTuple(envelope, "OOO!O!dO!U:envelope_parts", &lo, &hi, &PyTuple_Type, &mins, &PyTuple_Type, &maxs,
                          &threshold, &PyList_Type, &texts, &tail)
        || !PyArg_ParseTuple(lo, "ddd:envelope low", &self->env_lo[0], &self->env_lo[1], &self->env_lo[2])
        || !PyArg_ParseTuple(hi, "ddd:envelope high", &self->env_hi[0], &self->env_hi[1], &self->env_hi[2]))
        return -1;
    if (PyTuple_GET_SIZE(mins) != 3 || PyTuple_GET_SIZE(maxs) != 3 || !PyDict_Check(levels)) {
        PyErr_SetString(PyExc_ValueError, "Served: malformed reason parts");
        return -1;
    }
    self->env_threshold = threshold;
    Py_XSETREF(self->env_min, Py_NewRef(mins));
    Py_XSETREF(self->env_max, Py_NewRef(maxs));
    Py_XSETREF(self->shape_text, Py_NewRef(texts));
    Py_XSETREF(self->density_tail, Py_NewRef(tail));
    for (int level = 0; level < 3; level++) {
        PyObject *key = PyLong_FromLong(level), *parts = key ? PyDict_GetItemWithError(levels, key) : NULL;
        Py_XDECREF(key);
        Py_CLEAR(self->level_head[level]);
        Py_CLEAR(self->level_tail[level]);
        if (parts == NULL) {
            if (PyErr_Occurred())
                return -1;
            continue;
        }
        PyObject *head, *tail_;
        if (!PyArg_ParseTuple(parts, "UU:level_parts", &head, &tail_))
            return -1;
        self->level_head[level] = Py_NewRef(head);
        self->level_tail[level] = Py_NewRef(tail_);
    }
    return 0;
}

static int served_init(Served *self, PyObject *args, PyObject *kwargs)
{
    static char *kw[] = {"ranker", "mode", "top_more", "estimate", "vendor", "says_nothing", "max_extent",
                         "cache_size", "configs", "dtype", "family", "device", "layouts", "epilogues", "margin",
                         "nan", "results", "finish", "prediction_type", "rankresult_type", "estimate_type",
                         "envelope_parts", "level_parts", NULL};
    PyObject *ranker, *configs, *dtype, *family, *device, *layouts, *epilogues, *margin, *nan, *results, *finish,
        *ptype, *rtype, *etype, *envelope, *levels;
    int mode, top_more, estimate, vendor, says_nothing;
    long long max_extent;
    Py_ssize_t cache_size;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "$OiippiLnO!UUUO!O!O!O!O!OO!O!O!O!O!:Served", kw, &ranker,
                                     &mode, &top_more, &estimate, &vendor, &says_nothing, &max_extent, &cache_size,
                                     &PyTuple_Type, &configs, &dtype, &family, &device, &PyTuple_Type, &layouts,
                                     &PyTuple_Type, &epilogues, &PyFloat_Type, &margin, &PyFloat_Type, &nan,
                                     &PyDict_Type, &results, &finish, &PyType_Type, &ptype, &PyType_Type,
                                     &rtype, &PyType_Type, &etype, &PyTuple_Type, &envelope, &PyDict_Type, &levels))
        return -1;
    if (!PyType_IsSubtype((PyTypeObject *)ptype, &PyTuple_Type) || !PyType_IsSubtype((PyTypeObject *)rtype,
                                                                                        &PyTuple_Type)
        || !PyType_IsSubtype((PyTypeObject *)etype, &PyTuple_Type) || cache_size < 1 || max_extent < 1) {
        PyErr_SetString(PyExc_ValueError, "Served: the answer types must be named tuples, the sizes positive");
        return -1;
    }
    if (served_words_init(self, envelope, levels) < 0)
        return -1;
    PyObject *tls = PyObject_GetAttrString(ranker, "thread_contexts");
    PyObject *context = tls ? PyObject_GetAttrString(ranker, "context") : NULL;
    PyObject *fn = context ? PyObject_GetAttrString(ranker, "rank_function") : NULL;
    void *rank = fn ? PyLong_AsVoidPtr(fn) : NULL;
    Py_XDECREF(fn);
    if (rank == NULL) {
        Py_XDECREF(tls);
        Py_XDECREF(context);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "Served: the ranker has no rank function");
        return -1;
    }
    served_clear(self);
    self->ranker = Py_NewRef(ranker);
    self->tls = tls;
    self->context = context;
    self->rank = (rank_query_fn)rank;
    self->mode = mode; self->top_more = top_more; self->estimate = estimate; self->vendor = vendor;
    self->says_nothing = says_nothing; self->max_extent = max_extent; self->cache_size = cache_size;
    Py_XSETREF(self->configs, Py_NewRef(configs));
    Py_XSETREF(self->dtype, Py_NewRef(dtype));
    Py_XSETREF(self->family, Py_NewRef(family));
    Py_XSETREF(self->device, Py_NewRef(device));
    Py_XSETREF(self->layouts, Py_NewRef(layouts));
    Py_XSETREF(self->epilogues, Py_NewRef(epilogues));
    Py_XSETREF(self->margin, Py_NewRef(margin));
    Py_XSETREF(self->nan, Py_NewRef(nan));
    Py_XSETREF(self->results, Py_NewRef(results));
    Py_XSETREF(self->finish, Py_NewRef(finish));
    Py_XSETREF(self->prediction_type, Py_NewRef(ptype));
    Py_XSETREF(self->rankresult_type, Py_NewRef(rtype));
    Py_XSETREF(self->estimate_type, Py_NewRef(etype));
    Py_XSETREF(self->predicted, PyUnicode_InternFromString("predicted"));
    Py_XSETREF(self->by_layout_name, PyUnicode_InternFromString("by_layout"));
    return self->predicted == NULL || self->by_layout_name == NULL ? -1 : 0;
}

static PyMethodDef SERVED_METHODS[] = {
    {"predict", (PyCFunction)(void (*)(void))served_predict, METH_FASTCALL,
     "predict(m, n, k, layout, epilogue, top_k)\n--\n\nThe answer of a checked problem: cached, or ranked and "
     "cached."},
    {"predict_many", (PyCFunction)(void (*)(void))served_predict_many, METH_FASTCALL,
     "predict_many(shapes, top_k)\n--\n\npredict of each checked (m, n, k, layout, epilogue) tuple of the list "
     "shapes, in order."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject ServedType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "costlearn.ranker._served.Served",
    .tp_basicsize = sizeof(Served),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Served(*, ranker, ...): one Predictor's served path in C (costlearn/ranker/_served.c).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)served_init,
    .tp_dealloc = (destructor)served_dealloc,
    .tp_traverse = (traverseproc)served_traverse,
    .tp_clear = (inquiry)served_clear,
    .tp_methods = SERVED_METHODS,
};

/* A plain call of a loaded predictor with its served path: predict_best's own way (the predictor's answer cache,
 * else Answers.fresh), in C. Py_None (a new reference) where the function must answer. */
static PyObject *plain_call(entry_state *st, PyObject *const *v, PyObject *store)
{
    PyObject *model = PyTuple_Pack(3, v[P_DEVICE], v[P_FAMILY], v[P_DTYPE]);
    PyObject *names = model ? PyTuple_Pack(2, model, store) : NULL;
    PyObject *pred = names ? PyObject_CallOneArg(st->predictors_get, names) : NULL;
    PyObject *served = pred && pred != Py_None ? PyObject_GetAttr(pred, st->served_name) : NULL;
    PyObject *answer = NULL;
    Py_XDECREF(model);
    Py_XDECREF(names);
    Py_XDECREF(pred);
    if (served != NULL && Py_IS_TYPE(served, &ServedType)) {
        /* a repeated problem: a key of these exact ints and strs was stored only from arguments checked as these
         * would be (the predictor found by these names is of this dtype), so a hit needs no check */
        PyObject *key = PyTuple_Pack(6, v[P_M], v[P_N], v[P_K], v[P_LAYOUT], v[P_TOP_K], v[P_EPILOGUE]);
        PyObject *hit = key ? PyDict_GetItemWithError(((Served *)served)->results, key) : NULL;
        Py_XDECREF(key);
        if (hit != NULL) {
            Py_DECREF(served);
            return Py_NewRef(hit);
        }
        if (PyErr_Occurred()) {
            Py_DECREF(served);
            return NULL;
        }
    }
    int takes = served != NULL && Py_IS_TYPE(served, &ServedType) ? served_takes((Served *)served, v[P_M], v[P_N],
                                                                                 v[P_K], v[P_DTYPE], v[P_LAYOUT],
                                                                                 v[P_EPILOGUE], v[P_TOP_K]) : 0;
    if (takes == 1) {
        PyObject *args[6] = {v[P_M], v[P_N], v[P_K], v[P_LAYOUT], v[P_EPILOGUE], v[P_TOP_K]};
        answer = served_predict((Served *)served, args, 6);
    } else {
        PyErr_Clear();
        answer = Py_NewRef(Py_None);
    }
    Py_XDECREF(served);
    return answer;
}

static PyObject *entry_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    (void)self;
    entry_state *st = &STATE;
    PyObject *v[N_PARAMS] = {NULL};
    if (nargs > st->n_positional)
        goto slow;
    for (Py_ssize_t i = 0; i < nargs; i++)
        v[i] = args[i];
    if (kwnames != NULL) {
        Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
        for (Py_ssize_t j = 0; j < nkw; j++) {
            PyObject *name = PyTuple_GET_ITEM(kwnames, j);
            int at = -1;
            for (int i = 0; i < N_PARAMS; i++)           /* keyword names are interned: one compare each */
                if (name == st->names[i]) { at = i; break; }
            if (at < 0 && PyUnicode_CheckExact(name)) {  /* another str object of a name: its text decides (a
                                                          * str subclass's own __eq__ is the function's to judge) */
                for (int i = 0; i < N_PARAMS; i++)
                    if (PyUnicode_Compare(name, st->names[i]) == 0) { at = i; break; }
                if (PyErr_Occurred())
                    PyErr_Clear();
            }
            if (at < 0 || v[at] != NULL)
                goto slow;                               /* unknown or given twice: the function says so */
            v[at] = args[nargs + j];
        }
    }
    for (int i = 0; i < N_PARAMS; i++)
        if (v[i] == NULL && (v[i] = st->defaults[i]) == NULL)
            goto slow;                                   /* a required argument missing */
    {
        double now = monotonic_s();
        if (now >= st->next_watch_s) {                   /* the staleness rule, as predict_best runs it */
            st->next_watch_s = now + st->watch_every_s;
            PyObject *done = PyObject_CallNoArgs(st->watch);
            if (done == NULL)
                return NULL;
            Py_DECREF(done);
        }
    }
    /* predict_best's `plain`: only such a call is answered here */
    if (!(PyLong_CheckExact(v[P_M]) && PyLong_CheckExact(v[P_N]) && PyLong_CheckExact(v[P_K])
          && PyLong_CheckExact(v[P_TOP_K]) && PyLong_CheckExact(v[P_MEASURE_TOP_K])
          && v[P_RUNNING_ON] == Py_None && v[P_BACKEND] == Py_None && v[P_TUNING_DB] == Py_None
          && PyUnicode_CheckExact(v[P_LAYOUT]) && PyUnicode_CheckExact(v[P_EPILOGUE])
          && PyUnicode_CheckExact(v[P_DTYPE]) && PyUnicode_CheckExact(v[P_FAMILY])
          && exact_str_or_none(v[P_DEVICE])))
        goto slow;
    {
        int overflow = 0;
        if (PyLong_AsLongAndOverflow(v[P_MEASURE_TOP_K], &overflow) != 0 || overflow)
            goto slow;                                   /* measure: the function's work */
    }
    {
        PyObject *store = store_of(st, v[P_MODELS_DIR]);
        if (store == NULL) {                             /* no key: the function's to judge, and to say */
            PyErr_Clear();
            goto slow;
        }
        PyObject *answer = plain_call(st, v, store);
        Py_DECREF(store);
        if (answer != Py_None)                           /* an answer, or NULL: its error */
            return answer;
        Py_DECREF(answer);
    }
slow:
    return PyObject_Vectorcall(st->function, args, (size_t)nargs, kwnames);
}

static int read_signature(PyObject *function, entry_state *st)
{
    PyObject *code = PyObject_GetAttrString(function, "__code__");
    PyObject *varnames = NULL, *defaults = NULL, *kwdefaults = NULL;
    int ok = -1;
    long argcount, kwonly;
    if (code == NULL)
        goto done;
    PyObject *a = PyObject_GetAttrString(code, "co_argcount"), *k = PyObject_GetAttrString(code, "co_kwonlyargcount");
    argcount = a ? PyLong_AsLong(a) : -1;
    kwonly = k ? PyLong_AsLong(k) : -1;
    Py_XDECREF(a);
    Py_XDECREF(k);
    varnames = PyObject_GetAttrString(code, "co_varnames");
    defaults = PyObject_GetAttrString(function, "__defaults__");
    kwdefaults = PyObject_GetAttrString(function, "__kwdefaults__");
    if (PyErr_Occurred())
        goto done;
    if (argcount + kwonly != N_PARAMS || !PyTuple_Check(varnames) || PyTuple_GET_SIZE(varnames) < N_PARAMS
        || !(defaults == Py_None || PyTuple_Check(defaults)) || !(kwdefaults == Py_None || PyDict_Check(kwdefaults))) {
        PyErr_SetString(PyExc_ValueError, "entry: the function's signature is not predict_best's");
        goto done;
    }
    for (int i = 0; i < N_PARAMS; i++) {
        PyObject *name = PyTuple_GET_ITEM(varnames, i);
        if (!PyUnicode_Check(name) || PyUnicode_CompareWithASCIIString(name, PARAM_NAMES[i]) != 0) {
            PyErr_Format(PyExc_ValueError, "entry: parameter %d of the function is %R, predict_best's is '%s'",
                         i, name, PARAM_NAMES[i]);
            goto done;
        }
        Py_INCREF(name);
        PyUnicode_InternInPlace(&name);
        st->names[i] = name;
    }
    Py_ssize_t nd = defaults == Py_None ? 0 : PyTuple_GET_SIZE(defaults);
    for (int i = 0; i < N_PARAMS; i++) {
        PyObject *d = NULL;
        if (i < argcount) {
            if (i >= argcount - nd)
                d = PyTuple_GET_ITEM(defaults, i - (argcount - nd));
        } else if (kwdefaults != Py_None) {
            d = PyDict_GetItemWithError(kwdefaults, st->names[i]);
            if (d == NULL && PyErr_Occurred())
                goto done;
        }
        Py_XINCREF(d);
        st->defaults[i] = d;
    }
    st->n_positional = argcount;
    ok = 0;
done:
    Py_XDECREF(code);
    Py_XDECREF(varnames);
    Py_XDECREF(defaults);
    Py_XDECREF(kwdefaults);
    return ok;
}

static void clear_state(entry_state *st)
{
    Py_CLEAR(st->function);
    Py_CLEAR(st->predictors_get);
    Py_CLEAR(st->store_key);
    Py_CLEAR(st->served_name);
    Py_CLEAR(st->watch);
    for (int i = 0; i < N_PARAMS; i++) {
        Py_CLEAR(st->names[i]);
        Py_CLEAR(st->defaults[i]);
    }
    /* st->doc is kept: a builtin made before points into it */
}

static PyObject *entry(PyObject *module, PyObject *args)
{
    PyObject *function, *predictors_get, *store_key, *doc, *watch;
    double watch_every_s;
    (void)module;
    if (!PyArg_ParseTuple(args, "OOOSOd:entry", &function, &predictors_get, &store_key, &doc, &watch,
                          &watch_every_s))
        return NULL;
    if (!PyFunction_Check(function)) {
        PyErr_SetString(PyExc_TypeError, "entry: function must be a Python function");
        return NULL;
    }
    entry_state fresh = {0};
    PyObject *name = NULL, *name_bytes = NULL, *module_name = NULL, *out = NULL;
    PyMethodDef *def = NULL;
    if (read_signature(function, &fresh) != 0)
        goto fail;
    name = PyObject_GetAttrString(function, "__name__");
    name_bytes = name != NULL && PyUnicode_Check(name) ? PyUnicode_AsUTF8String(name) : NULL;
    module_name = PyObject_GetAttrString(function, "__module__");
    def = PyMem_Calloc(1, sizeof(PyMethodDef));      /* lives as long as the process, as name_bytes and doc: a
                                                      * builtin points at its def */
    fresh.served_name = PyUnicode_InternFromString("served");
    if (name_bytes == NULL || module_name == NULL || def == NULL || fresh.served_name == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "entry: the function has no usable __name__ or __module__");
        goto fail;
    }
    def->ml_name = PyBytes_AS_STRING(name_bytes);
    def->ml_meth = (PyCFunction)(void (*)(void))entry_call;
    def->ml_flags = METH_FASTCALL | METH_KEYWORDS;
    def->ml_doc = PyBytes_AS_STRING(doc);
    out = PyCFunction_NewEx(def, NULL, module_name);
    if (out == NULL)
        goto fail;
    Py_INCREF(doc);                                  /* kept for good, as name_bytes' reference */
    name_bytes = NULL;
    Py_INCREF(function);
    fresh.function = function;
    fresh.predictors_get = Py_NewRef(predictors_get);
    fresh.store_key = Py_NewRef(store_key);
    fresh.watch = Py_NewRef(watch);
    fresh.watch_every_s = watch_every_s;
    fresh.doc = doc;
    clear_state(&STATE);
    STATE = fresh;
    Py_DECREF(name);
    Py_DECREF(module_name);
    return out;
fail:
    if (out == NULL)
        PyMem_Free(def);
    Py_XDECREF(name);
    Py_XDECREF(name_bytes);
    Py_XDECREF(module_name);
    clear_state(&fresh);
    return NULL;
}

static PyMethodDef METHODS[] = {
    {"entry", entry, METH_VARARGS,
     "entry(function, predictors_get, store_key, doc, watch, watch_every_s)\n--\n\nA builtin with "
     "function's signature (predict_best's, checked) answering a plain call of a loaded predictor "
     "(predictors_get, by models_dir's store_key) with its Served, and "
     "handing every other call to function; doc is its __doc__ (bytes, with the text signature first); every "
     "watch_every_s seconds a call first calls watch() (the staleness rule)."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef MODULE = {PyModuleDef_HEAD_INIT, "_served",
                                    "costlearn's served path in C (costlearn/ranker/_served.c)", -1, METHODS,
                                    NULL, NULL, NULL, NULL};

#ifndef COSTLEARN_SOURCE_SHA256
#error "compile with -DCOSTLEARN_SOURCE_SHA256=\"...\" (setup.py; costlearn/ranker/_build.py: source_sha256)"
#endif

PyMODINIT_FUNC PyInit__served(void)
{
    if (PyType_Ready(&ServedType) < 0)
        return NULL;
    PyObject *module = PyModule_Create(&MODULE);
    if (module != NULL && (PyModule_AddObjectRef(module, "Served", (PyObject *)&ServedType) < 0
                           || PyModule_AddStringConstant(module, "SOURCE_SHA256", COSTLEARN_SOURCE_SHA256) < 0))
        Py_CLEAR(module);
    return module;
}
