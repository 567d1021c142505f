/* costlearn's predictor hot path in C, loaded by costlearn/native.py:
 *
 *   costlearn_forest_predict   a tree ensemble over a small batch of rows
 *   costlearn_shape_features   the shape-dependent analytic features
 *   costlearn_nearest          nearest training shape (OOD density check)
 *
 * Each has a numpy twin that is the reference (tests compare them):
 * FlatForest vs xgboost, costlearn.features.analytic.shape_arrays,
 * costlearn.envelope.Envelope.nearest. Compiled with -ffp-contract=off so
 * that floating-point expressions are evaluated exactly as written, in the
 * order numpy evaluates them.
 *
 * Forest: flat arrays built by costlearn/model/forest.py.
 * Each tree is laid out so that the children of a node are adjacent
 * (child, child + 1) and every leaf points to itself and never moves
 * (internal = 0); a tree of depth D is then walked in exactly D branch-free
 * steps. Decision rule as in XGBoost: go to the first child when
 * x < threshold, to the default child when x is NaN. */
#include <stdint.h>

typedef struct {
    int32_t feature;    /* column of X tested by this node                  */
    float threshold;    /* first child when x < threshold                   */
    int32_t child;      /* index of the first child (the node itself at a leaf) */
    int16_t missing;    /* 0 or 1: which child a NaN goes to                */
    int16_t internal;   /* 1 at a split, 0 at a leaf                        */
} costlearn_node;

#define STEP(i) do {                                                                  \
        const costlearn_node nd = nodes[i];                                               \
        const float xv = x[nd.feature];                                                   \
        i = nd.child + (((xv != xv) ? nd.missing : !(xv < nd.threshold)) & nd.internal);  \
    } while (0)

static inline int32_t max2(int32_t a, int32_t b) { return a > b ? a : b; }

/* out[r] = sum over trees of the leaf value reached by row r (no base score),
 * summed in tree order. X: n_rows x n_features, row-major float32.
 * Trees are walked eight at a time per row: eight independent chains of
 * dependent loads keep the pipeline busy even for a handful of rows. A walk
 * may take more steps than its tree is deep: a leaf stays where it is. */
int costlearn_forest_predict(const costlearn_node *nodes, const float *leaf_value,
                             const int32_t *roots, const int32_t *depths, int32_t n_trees,
                             const float *X, int32_t n_rows, int32_t n_features, double *out)
{
    if (n_rows < 0 || n_trees < 0)
        return -1;
    for (int32_t r = 0; r < n_rows; ++r) {
        const float *x = X + (int64_t)r * n_features;
        double acc = 0.0;
        int32_t t = 0;
        for (; t + 8 <= n_trees; t += 8) {
            int32_t i0 = roots[t], i1 = roots[t + 1], i2 = roots[t + 2], i3 = roots[t + 3];
            int32_t i4 = roots[t + 4], i5 = roots[t + 5], i6 = roots[t + 6], i7 = roots[t + 7];
            const int32_t depth = max2(max2(max2(depths[t], depths[t + 1]), max2(depths[t + 2], depths[t + 3])),
                                       max2(max2(depths[t + 4], depths[t + 5]), max2(depths[t + 6], depths[t + 7])));
            for (int32_t d = 0; d < depth; ++d) {
                STEP(i0); STEP(i1); STEP(i2); STEP(i3); STEP(i4); STEP(i5); STEP(i6); STEP(i7);
            }
            acc += leaf_value[i0]; acc += leaf_value[i1]; acc += leaf_value[i2]; acc += leaf_value[i3];
            acc += leaf_value[i4]; acc += leaf_value[i5]; acc += leaf_value[i6]; acc += leaf_value[i7];
        }
        for (; t < n_trees; ++t) {
            int32_t i = roots[t];
            for (int32_t d = 0; d < depths[t]; ++d)
                STEP(i);
            acc += leaf_value[i];
        }
        out[r] = acc;
    }
    return 0;
}

#undef STEP

#include <math.h>

/* The 18 shape-dependent features of costlearn.features.analytic, in the
 * order of SHAPE_FEATURES there; cols[j] is the column of X that feature j
 * goes to, or -1 to skip it. Every expression mirrors shape_arrays
 * (same operations, same order). Per candidate c: block[c], block[C + c],
 * block[2C + c] are BM, BN, KS; slots[c] = blocks per MP x MPs;
 * tile_occ[c] = min(1, 4 x occupancy). s: element bytes; peak: flop per us;
 * bw: bytes per us. */
void costlearn_shape_features(int64_t m, int64_t n, int64_t k, const int64_t *block, const int64_t *slots,
                              const double *tile_occ, double s, double peak, double bw, int32_t n_cands,
                              const int32_t *cols, float *X, int32_t n_features)
{
    const double mf = (double)m, nf = (double)n, kf = (double)k;
    const double flops = 2.0 * mf * nf * kf;
    const double abc = s * (mf * kf + kf * nf + mf * nf);
    const double memory_us = abc / bw;
    for (int32_t c = 0; c < n_cands; ++c) {
        const int64_t bm = block[c], bn = block[n_cands + c], bk = block[2 * n_cands + c];
        const int64_t grid_m = (m + bm - 1) / bm, grid_n = (n + bn - 1) / bn, k_steps = (k + bk - 1) / bk;
        const int64_t blocks = grid_m * grid_n;
        const double waves = (double)blocks / (double)slots[c];
        const double full = ceil(waves);
        const double last_fill = waves - (full - 1.0);
        const double util = waves / full;
        const double padded = (double)(grid_m * bm) * (double)(grid_n * bn) * (double)(k_steps * bk);
        const double waste = 1.0 - mf * nf * kf / padded;
        const double compute_us = 2.0 * padded / peak;
        const double tiled_us = s * (mf * kf * (double)grid_n + kf * nf * (double)grid_m + mf * nf) / bw;
        const double roof = compute_us > memory_us ? compute_us : memory_us;
        const double corr_c = compute_us / (util * tile_occ[c]);
        const double corrected = corr_c > tiled_us ? corr_c : tiled_us;
        const double v[18] = {
            log2(mf), log2(nf), log2(kf), log2(flops), flops / abc,
            log2((double)blocks), waves, last_fill, util, (double)k_steps, 1.0 / (double)k_steps, waste,
            log2(compute_us), log2(memory_us), log2(tiled_us), log2(roof), log2(corrected),
            compute_us >= memory_us ? 1.0 : 0.0,
        };
        float *row = X + (int64_t)c * n_features;
        for (int j = 0; j < 18; ++j)
            if (cols[j] >= 0)
                row[cols[j]] = (float)v[j];
    }
}

/* Index of the point (row of points, n_points x 3) nearest to q; its squared
 * distance in *d2. The first of equals wins, as numpy's argmin. */
int32_t costlearn_nearest(const double *points, int32_t n_points, const double *q, double *d2)
{
    int32_t best = 0;
    double best_d = INFINITY;
    for (int32_t i = 0; i < n_points; ++i) {
        const double a = points[3 * i] - q[0], b = points[3 * i + 1] - q[1], c = points[3 * i + 2] - q[2];
        const double d = a * a + b * b + c * c;
        if (d < best_d) {
            best_d = d;
            best = i;
        }
    }
    *d2 = best_d;
    return best;
}

/* ---- costlearn_rank: the whole cold predict_best in one call ------------ */

#include <stdlib.h>
#include <string.h>

typedef struct { double score; int32_t index; } scored;

static int by_score(const void *a, const void *b)
{
    const scored *x = (const scored *)a, *y = (const scored *)b;
    if (x->score < y->score) return -1;
    if (x->score > y->score) return 1;
    return (x->index > y->index) - (x->index < y->index);     /* ties: lower index first */
}

/* Rank the candidates with mask[c] != 0 for shape (m, n, k); the C twin of
 * Predictor._ranked in costlearn/predict.py:
 *   1. features of every candidate: `template` (n_cands x n_features, the
 *      per-config columns filled) copied to X, shape columns by
 *      costlearn_shape_features; then the masked rows compacted to the top;
 *   2. if 0 < stage_trees < n_trees and more than `keep` rows: the first
 *      stage_trees trees on every row, the `keep` best go on (the cascade);
 *   3. the (remaining) trees on the survivors;
 * score = sign * (base + sum of leaves), summed in the order the Python
 * path sums; lower is faster, ties broken by lower row.
 * Writes the survivors best first to ctx->out_index (candidate numbers)
 * and ctx->out_score and returns how many (0 if none is masked); also the
 * nearest training shape (ctx->nearest, ctx->nearest_d2) in the envelope's
 * log-shape and aspect space.
 * Scratch in ctx: X and Xk (n_cands x n_features floats), work (n_cands),
 * part and rest (n_cands doubles), row_cand (n_cands). */
typedef struct {
    /* features */
    const float *template; int32_t n_cands; int32_t n_features;
    const int64_t *block; const int64_t *slots; const double *tile_occ;
    double s; double peak; double bw; const int32_t *cols;
    /* forest */
    const costlearn_node *nodes; const float *leaf_value; const int32_t *roots; const int32_t *depths;
    int32_t n_trees; double base; double sign;
    /* envelope: training shapes embedded (n_env x 3), embedding matrix (3 x 3, row-major) */
    const double *env_points; int32_t n_env; double embed[9];
    /* scratch, one set per calling thread */
    float *X; float *Xk; scored *work; double *part; double *rest; int32_t *row_cand;
    /* outputs */
    int32_t *out_index; double *out_score; int32_t nearest; double nearest_d2;
} costlearn_ctx;

int32_t costlearn_rank(int64_t m, int64_t n, int64_t k, const uint8_t *mask, int32_t stage_trees, int32_t keep,
                       costlearn_ctx *ctx)
{
    const float *template = ctx->template;
    const int32_t n_cands = ctx->n_cands, n_features = ctx->n_features, n_trees = ctx->n_trees;
    const costlearn_node *nodes = ctx->nodes;
    const float *leaf_value = ctx->leaf_value;
    const int32_t *roots = ctx->roots, *depths = ctx->depths;
    const double base = ctx->base, sign = ctx->sign;
    float *X = ctx->X, *Xk = ctx->Xk;
    scored *work = ctx->work;
    double *part = ctx->part, *rest = ctx->rest, *out_score = ctx->out_score;
    int32_t *row_cand = ctx->row_cand, *out_index = ctx->out_index;
    {   /* nearest training shape, for the OOD density check */
        const double x0 = log2((double)m), x1 = log2((double)n), x2 = log2((double)k);
        double q[3];
        for (int j = 0; j < 3; ++j)
            q[j] = x0 * ctx->embed[j] + x1 * ctx->embed[3 + j] + x2 * ctx->embed[6 + j];
        ctx->nearest = costlearn_nearest(ctx->env_points, ctx->n_env, q, &ctx->nearest_d2);
    }

    const size_t row_bytes = sizeof(float) * (size_t)n_features;
    memcpy(X, template, row_bytes * (size_t)n_cands);
    costlearn_shape_features(m, n, k, ctx->block, ctx->slots, ctx->tile_occ, ctx->s, ctx->peak, ctx->bw, n_cands,
                             ctx->cols, X, n_features);
    int32_t rows = 0;
    for (int32_t c = 0; c < n_cands; ++c)
        if (mask[c]) {
            if (rows != c)
                memcpy(X + (int64_t)rows * n_features, X + (int64_t)c * n_features, row_bytes);
            row_cand[rows++] = c;
        }
    if (rows == 0)
        return 0;
    int32_t live = rows;
    if (stage_trees > 0 && stage_trees < n_trees && keep > 0 && rows > keep) {
        costlearn_forest_predict(nodes, leaf_value, roots, depths, stage_trees, X, rows, n_features, part);
        for (int32_t r = 0; r < rows; ++r) {
            work[r].score = sign * (part[r] + base);
            work[r].index = r;
        }
        qsort(work, (size_t)rows, sizeof(scored), by_score);
        for (int32_t r = 0; r < keep; ++r)
            memcpy(Xk + (int64_t)r * n_features, X + (int64_t)work[r].index * n_features, row_bytes);
        costlearn_forest_predict(nodes, leaf_value, roots + stage_trees, depths + stage_trees,
                                 n_trees - stage_trees, Xk, keep, n_features, rest);
        for (int32_t r = 0; r < keep; ++r)
            work[r].score = sign * ((part[work[r].index] + base) + rest[r]);
        live = keep;
    } else {
        costlearn_forest_predict(nodes, leaf_value, roots, depths, n_trees, X, rows, n_features, part);
        for (int32_t r = 0; r < rows; ++r) {
            work[r].score = sign * (part[r] + base);
            work[r].index = r;
        }
    }
    qsort(work, (size_t)live, sizeof(scored), by_score);
    for (int32_t r = 0; r < live; ++r) {
        out_index[r] = row_cand[work[r].index];
        out_score[r] = work[r].score;
    }
    return live;
}
