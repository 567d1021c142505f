/* costlearn's ranker in C (costlearn/ranker/_native.h lists its files): the
 * scores. A tree ensemble over a small batch of rows (costlearn_forest_predict)
 * and its nodes as it walks them (costlearn_sentinel_leaves); the 23 shape
 * features (costlearn_shape_features); a context's feature rows and their
 * scores with the first trees (feature_rows, partial_scores: the ranking's
 * and the shortlist table's); math.fsum (costlearn_fsum) and the vendor
 * model's estimate (vendor_estimate).
 *
 * Forest layout (costlearn/model/forest.py): the children of a node are
 * adjacent (child, child + 1), as offsets from the tree's root; a leaf points
 * to itself and keeps its value where an internal node keeps its threshold,
 * so a tree of depth D is walked in exactly D branch-free steps (here, with
 * each leaf's feature the sentinel column of -inf that every feature row
 * ends with: costlearn_sentinel_leaves). Decision rule: the first child when
 * x < value, the second otherwise (a NaN goes to the second; feature rows are
 * NaN-free by the FeatureSet contract). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_native.h"

/* One step down a tree t (its nodes) for row x: the first child when x[feature] < value, else the second.
 * A leaf's feature is the sentinel column (-inf in every row, costlearn_sentinel_leaves), so it stays put:
 * no flag to test, three loads and an add a step. */
#define STEP(i, t, x) do {                                                                   \
        const costlearn_node *nd_ = (t) + (i);                                               \
        (i) = nd_->child + !((x)[nd_->feature] < nd_->value);                                \
    } while (0)

static inline int32_t max2(int32_t a, int32_t b) { return a > b ? a : b; }

/* out[r] = sum over trees of the leaf value reached by row r (no base score),
 * summed in float64 in tree order. X: n_rows x n_features, row-major float32,
 * whose last column is the sentinel (-inf); nodes as costlearn_sentinel_leaves
 * writes them. Tree-major: a few trees at a time, each row (or pair of rows)
 * walks those (eight independent chains of dependent loads), so each tree's
 * nodes come into the cache once per call, not once per row: four trees for a
 * pair of rows, eight for a row alone (the vendor model's one row). What this
 * walk gained over a leaf flag, and what more chains did not: docs/results.md,
 * "A walk without a leaf flag". */
int32_t costlearn_forest_predict(const costlearn_node *nodes, const int32_t *roots, const int32_t *depths,
                                 int32_t n_trees, const float *X, int32_t n_rows, int32_t n_features, double *out)
{
    if (n_rows < 0 || n_trees < 0)
        return -1;
    for (int32_t r = 0; r < n_rows; ++r)
        out[r] = 0.0;
    int32_t t = 0;
    if (n_rows == 1) {
        const float *x = X;
        for (; t + 8 <= n_trees; t += 8) {
            const costlearn_node *t0 = nodes + roots[t], *t1 = nodes + roots[t + 1], *t2 = nodes + roots[t + 2],
                                 *t3 = nodes + roots[t + 3], *t4 = nodes + roots[t + 4], *t5 = nodes + roots[t + 5],
                                 *t6 = nodes + roots[t + 6], *t7 = nodes + roots[t + 7];
            const int32_t depth = max2(max2(max2(depths[t], depths[t + 1]), max2(depths[t + 2], depths[t + 3])),
                                       max2(max2(depths[t + 4], depths[t + 5]), max2(depths[t + 6], depths[t + 7])));
            uint32_t i0 = 0, i1 = 0, i2 = 0, i3 = 0, i4 = 0, i5 = 0, i6 = 0, i7 = 0;
            for (int32_t d = 0; d < depth; ++d) {
                STEP(i0, t0, x); STEP(i1, t1, x); STEP(i2, t2, x); STEP(i3, t3, x);
                STEP(i4, t4, x); STEP(i5, t5, x); STEP(i6, t6, x); STEP(i7, t7, x);
            }
            double acc = out[0];
            acc += t0[i0].value; acc += t1[i1].value; acc += t2[i2].value; acc += t3[i3].value;
            acc += t4[i4].value; acc += t5[i5].value; acc += t6[i6].value; acc += t7[i7].value;
            out[0] = acc;
        }
    } else {
        for (; t + 4 <= n_trees; t += 4) {
            const costlearn_node *t0 = nodes + roots[t], *t1 = nodes + roots[t + 1], *t2 = nodes + roots[t + 2],
                                 *t3 = nodes + roots[t + 3];
            const int32_t depth = max2(max2(depths[t], depths[t + 1]), max2(depths[t + 2], depths[t + 3]));
            int32_t r = 0;
            for (; r + 2 <= n_rows; r += 2) {
                const float *x = X + (int64_t)r * n_features, *y = x + n_features;
                uint32_t i0 = 0, i1 = 0, i2 = 0, i3 = 0, j0 = 0, j1 = 0, j2 = 0, j3 = 0;
                for (int32_t d = 0; d < depth; ++d) {
                    STEP(i0, t0, x); STEP(i1, t1, x); STEP(i2, t2, x); STEP(i3, t3, x);
                    STEP(j0, t0, y); STEP(j1, t1, y); STEP(j2, t2, y); STEP(j3, t3, y);
                }
                double a = out[r], b = out[r + 1];
                a += t0[i0].value; a += t1[i1].value; a += t2[i2].value; a += t3[i3].value;
                b += t0[j0].value; b += t1[j1].value; b += t2[j2].value; b += t3[j3].value;
                out[r] = a;
                out[r + 1] = b;
            }
            if (r < n_rows) {                          /* the odd row */
                const float *x = X + (int64_t)r * n_features;
                uint32_t i0 = 0, i1 = 0, i2 = 0, i3 = 0;
                for (int32_t d = 0; d < depth; ++d) {
                    STEP(i0, t0, x); STEP(i1, t1, x); STEP(i2, t2, x); STEP(i3, t3, x);
                }
                double a = out[r];
                a += t0[i0].value; a += t1[i1].value; a += t2[i2].value; a += t3[i3].value;
                out[r] = a;
            }
        }
    }
    for (; t < n_trees; ++t) {                         /* the trees left over, one at a time */
        const costlearn_node *tp = nodes + roots[t];
        for (int32_t r = 0; r < n_rows; ++r) {
            const float *x = X + (int64_t)r * n_features;
            uint32_t i = 0;
            for (int32_t d = 0; d < depths[t]; ++d)
                STEP(i, tp, x);
            out[r] += tp[i].value;
        }
    }
    return 0;
}

#undef STEP

/* A forest's nodes (costlearn/model/forest.py: a leaf has flags bit 0 clear) as costlearn_forest_predict
 * walks them: each leaf's feature set to `sentinel` (the column of -inf after a row's features), the rest
 * copied. Returns 0, or -1 when an internal node's feature is not below the sentinel. */
int32_t costlearn_sentinel_leaves(const costlearn_node *in, int64_t n, int32_t sentinel, costlearn_node *out)
{
    if (sentinel < 1 || sentinel > 255)
        return -1;
    for (int64_t i = 0; i < n; ++i) {
        out[i] = in[i];
        if (!(in[i].flags & 1))
            out[i].feature = (uint8_t)sentinel;
        else if (in[i].feature >= sentinel)
            return -1;
    }
    return 0;
}

/* The 23 shape-dependent features (SHAPE_FEATURES in costlearn/features/base.py),
 * for the candidates rows[0..n_rows), into row r of X; cols[j] is the column
 * of feature j, or -1 to skip it. Every expression mirrors
 * costlearn.features.analytic.shape_arrays (same operations, same order).
 * Per candidate c: block[c], block[C + c], block[2C + c] are BM, BN, KS;
 * slots[c] = blocks per MP x MPs; tile_occ[c] = min(1, 4 x occupancy);
 * fill[c] = panel loads before the first multiply. s: element bytes; peak:
 * flop per us; bw: bytes per us; epi_f: the epilogue's flops per output
 * element, epi_b: its bias bytes per output column (0 without a bias). */
void costlearn_shape_features(int64_t m, int64_t n, int64_t k, const int32_t *rows, int32_t n_rows,
                              int32_t n_cands, const int64_t *block, const int64_t *slots, const double *tile_occ,
                              const double *fill, double s, double peak, double bw, double epi_f, double epi_b,
                              const int32_t *cols, float *X, int32_t n_features)
{
    const double mf = (double)m, nf = (double)n, kf = (double)k;
    const double flops = 2.0 * mf * nf * kf;
    const double abc = s * (mf * kf + kf * nf + mf * nf);
    const double memory_us = abc / bw;
    /* The features of the problem alone, once (the same values for every row). */
    const double l2m = log2(mf), l2n = log2(nf), l2k = log2(kf), l2flops = log2(flops), ai = flops / abc;
    const double l2memory = log2(memory_us);
    const double epi_flop_share = epi_f / (2.0 * kf + epi_f);
    for (int32_t r = 0; r < n_rows; ++r) {
        const int32_t c = rows[r];
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
        const double corr_c = compute_us / (util * tile_occ[c]);
        const double l2compute = log2(compute_us), l2tiled = log2(tiled_us);
        /* log2 of a maximum is the log2 of the argument chosen (the same bits
         * as numpy's log2(maximum(a, b))): roof = max(compute, memory),
         * corrected = max(corr_c, tiled). */
        const double l2roof = compute_us > memory_us ? l2compute : l2memory;
        const double l2corrected = corr_c > tiled_us ? log2(corr_c) : l2tiled;
        const double tiled_bytes = s * (mf * kf * (double)grid_n + kf * nf * (double)grid_m + mf * nf);
        const double bias_bytes = (double)blocks * (double)bn * epi_b;
        const double v[23] = {
            l2m, l2n, l2k, l2flops, ai,
            log2((double)blocks), waves, last_fill, util, (double)k_steps, fill[c] / (double)k_steps, waste,
            l2compute, l2memory, l2tiled, l2roof, l2corrected,
            compute_us >= memory_us ? 1.0 : 0.0,
            epi_f, (double)(bm * bn) * epi_f, (double)bn * epi_b, epi_flop_share,
            bias_bytes / (tiled_bytes + bias_bytes),
        };
        float *row = X + (int64_t)r * n_features;
        for (int j = 0; j < 23; ++j)
            if (cols[j] >= 0)
                row[cols[j]] = (float)v[j];
    }
}

/* The feature rows of row_cand[0..rows) into ctx->X, and their linear terms
 * into ctx->lin; returns ctx->lin or NULL when the scorer has none. */
double *feature_rows(int64_t m, int64_t n, int64_t k, int32_t rows, costlearn_ctx *ctx)
{
    const int32_t n_features = ctx->n_features;
    const int32_t *row_cand = ctx->row_cand;
    float *X = ctx->X;
    const size_t row_bytes = sizeof(float) * (size_t)n_features;
    for (int32_t r = 0; r < rows; ++r)
        memcpy(X + (int64_t)r * n_features, ctx->template_ + (int64_t)row_cand[r] * n_features, row_bytes);
    costlearn_shape_features(m, n, k, row_cand, rows, ctx->n_cands, ctx->block, ctx->slots, ctx->tile_occ,
                             ctx->fill, ctx->s, ctx->peak, ctx->bw, ctx->epi_flops, ctx->epi_bytes, ctx->cols, X,
                             n_features);
    if (ctx->column < 0 && ctx->offsets == NULL)
        return NULL;
    double *lin = ctx->lin;
    for (int32_t r = 0; r < rows; ++r) {
        double v = 0.0;
        int have = 0;
        if (ctx->column >= 0) { v = ctx->column_weight * (double)X[(int64_t)r * n_features + ctx->column]; have = 1; }
        if (ctx->offsets != NULL) { v = have ? v + ctx->offsets[row_cand[r]] : ctx->offsets[row_cand[r]]; }
        lin[r] = v;
    }
    return lin;
}

/* Scores of the rows with the first `trees` trees: sign * (sum + base) + lin
 * (sign * base + lin without a forest), into ctx->acc. */
void partial_scores(int32_t rows, int32_t trees, const double *lin, costlearn_ctx *ctx)
{
    double *acc = ctx->acc;
    if (ctx->has_forest && trees > 0) {
        costlearn_forest_predict((const costlearn_node *)ctx->nodes, ctx->roots, ctx->depths, trees, ctx->X, rows,
                                 ctx->n_features, ctx->part);
        for (int32_t r = 0; r < rows; ++r)
            acc[r] = ctx->sign * (ctx->part[r] + ctx->base);
    } else {
        for (int32_t r = 0; r < rows; ++r)
            acc[r] = ctx->has_forest ? ctx->sign * ctx->base : 0.0;
    }
    if (lin != NULL)
        for (int32_t r = 0; r < rows; ++r)
            acc[r] = acc[r] + lin[r];
}

/* The correctly rounded sum of x[0..n) (finite values): Python's math.fsum
 * (Shewchuk's exact partials, then the round-half-even correction of
 * CPython's Modules/mathmodule.c), so that a mean computed here has the
 * bits math.fsum gives (costlearn.model.vendor.VendorModel._moments).
 * n <= MAX_MEMBERS (32): at most n + 1 partials. */
double costlearn_fsum(const double *x, int32_t n)
{
    double p[33];
    int32_t np_ = 0;
    for (int32_t i = 0; i < n; ++i) {
        double v = x[i];
        int32_t j = 0;
        for (int32_t a = 0; a < np_; ++a) {
            double y = p[a];
            if (fabs(v) < fabs(y)) { const double t = v; v = y; y = t; }
            const double hi = v + y;
            const double lo = y - (hi - v);
            if (lo != 0.0) p[j++] = lo;
            v = hi;
        }
        np_ = j;
        if (v != 0.0) p[np_++] = v;
    }
    double hi = 0.0;
    if (np_ > 0) {
        double lo = 0.0;
        hi = p[--np_];
        while (np_ > 0) {                                 /* sum_exact(p) from the top, until inexact */
            const double v = hi, y = p[--np_];
            hi = v + y;
            const double yr = hi - v;
            lo = y - yr;
            if (lo != 0.0) break;
        }
        /* half-way cases: round toward the sign of the next partial */
        if (np_ > 0 && ((lo < 0.0 && p[np_ - 1] < 0.0) || (lo > 0.0 && p[np_ - 1] > 0.0))) {
            const double y = lo * 2.0, v = hi + y, yr = v - hi;
            if (y == yr) hi = v;
        }
    }
    return hi;
}

/* The number of trailing zero bits of v, at most cap. */
static int32_t trailing_zeros(int64_t v, int32_t cap)
{
    int32_t z = 0;
    while (z < cap && (v & ((int64_t)1 << z)) == 0) ++z;
    return z;
}

/* The vendor model's estimate for problem (m, n, k) whose log2 extents are
 * x (costlearn.model.vendor: problem_row, then VendorModel._moments): its
 * row (the extents' logs and aspects, their trailing zero bits capped at
 * v_pow2_cap, then the context's v_tail: the epilogue's flops and the layout
 * one-hot) rounded to float32, each member's trees summed in float64 plus
 * its base score, and the members' mean and standard deviation (math.fsum
 * sums; pow and sqrt of libm, as Python's float ** 2 and math.sqrt) into
 * ctx->v_mean, ctx->v_sd. */
void vendor_estimate(int64_t m, int64_t n, int64_t k, const double x[3], costlearn_ctx *ctx)
{
    const int32_t members = ctx->v_members, width = ctx->v_features;
    float *row = ctx->v_row;
    const double head[9] = {x[0], x[1], x[2], x[0] + x[1] + x[2] + 1.0, x[0] + x[1] - x[2], x[0] - x[1],
                            (double)trailing_zeros(m, ctx->v_pow2_cap), (double)trailing_zeros(n, ctx->v_pow2_cap),
                            (double)trailing_zeros(k, ctx->v_pow2_cap)};
    for (int j = 0; j < 9; ++j) row[j] = (float)head[j];
    for (int32_t j = 9; j < width; ++j) row[j] = ctx->v_tail[j - 9];
    row[width] = -INFINITY;                            /* the sentinel column */
    double *vals = ctx->v_sums;
    for (int32_t i = 0; i < members; ++i) {
        costlearn_forest_predict(ctx->v_nodes, ctx->v_roots + ctx->v_bounds[i], ctx->v_depths + ctx->v_bounds[i],
                                 ctx->v_bounds[i + 1] - ctx->v_bounds[i], row, 1, width + 1, vals + i);
        vals[i] = vals[i] + ctx->v_bases[i];
    }
    const double mean = costlearn_fsum(vals, members) / (double)members;
    double sq[32];                                     /* members <= 32: VendorModel's MAX_MEMBERS */
    for (int32_t i = 0; i < members; ++i) sq[i] = pow(fabs(vals[i] - mean), 2.0);
    ctx->v_mean = mean;
    ctx->v_sd = sqrt(costlearn_fsum(sq, members) / (double)members);
}
