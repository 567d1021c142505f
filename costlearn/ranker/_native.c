/* costlearn's ranker in C, loaded by costlearn/ranker/native_library.py:
 *
 *   costlearn_forest_predict   a tree ensemble over a small batch of rows
 *   costlearn_sentinel_leaves  a forest's nodes as costlearn_forest_predict walks them
 *   costlearn_shape_features   the 23 shape-dependent features
 *   costlearn_rank_query       a whole ranking (costlearn_rank of the query in the
 *                              context): candidate rule, features, nearest
 *                              training shape, held-out evidence, cascaded or
 *                              shortlist-table scoring, sort, and (mode bit
 *                              RANK_ESTIMATE) the vendor model's estimate
 *   costlearn_fsum             math.fsum: the correctly rounded sum
 *   costlearn_rank_many        costlearn_rank for many problems in one call
 *   costlearn_shortlist_build  the shortlist table's lists at grid points
 *   costlearn_layout           sizes and field offsets of the structs, checked at load
 *   costlearn_source_sha256    what this build was compiled from, checked at load
 *
 * Built by the package build (setup.py; costlearn/ranker/_build.py), not at run time.
 * The structs costlearn_node and costlearn_ctx are not written here: they are
 * generated from their one definition in Python (costlearn/ranker/native_structs.py:
 * NODE_DTYPE of costlearn.model.forest, RankContext) into costlearn_structs.h.
 *
 * Each function has a numpy twin that gives the same bits (tests compare them):
 * FlatForest.partial_sum_numpy, features.analytic.shape_arrays,
 * Envelope.nearest, NumpyRanker.rank. Compiled with -ffp-contract=off so that
 * floating-point expressions are evaluated exactly as written, in the order
 * numpy evaluates them.
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

#include "costlearn_structs.h"

#define RANK_ESTIMATE 4    /* costlearn_rank's mode bit: also the vendor model's estimate (RANK_ESTIMATE in native.py) */
#define RANK_DECIDE 8      /* costlearn_rank's mode bit: also the floor's decision (RANK_DECIDE in native.py) */

/* ctx->decision's bits (DECISION_* in costlearn/ranker/base.py) */
#define DECIDED 1          /* the decision below was made */
#define OUTSIDE 2          /* outside the training envelope: Envelope.reasons is not empty */
#define UNSURE 4           /* the held-out evidence flags the problem: VendorFloor.unsure_reason */
#define DOUBT 8            /* the vendor model doubts the decision: VendorFloor.estimate_reason */
#define TIME 256           /* the best time may beat the device's limits: OODVerdict.time_reasons may say so */
#define FAR 512            /* beyond the floor's transfer reach, decided by the transfer: VendorFloor.transfer_reason */
#define NEAR_LIMIT (1.0 + 0x1p-40)   /* TIME's slack: far above the roundings of 2*m*n*k in doubles */

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(p) __builtin_prefetch(p)
#else
#define PREFETCH(p) ((void)(p))           /* a compiler without it: the same answers, fetched on use */
#endif

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
 * pair of rows, eight for a row alone (the vendor model's one row; 1.3x and
 * 1.37x the speed of eight trees with a leaf flag, on 11 and 64 rows of a
 * real model). */
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

/* Nearest training shape to the embedded query q: points sorted by their
 * first coordinate (index[i] = the point's place in the envelope's list), a
 * scan outward from q's position that stops on each side once the first
 * coordinate alone is further than the best so far. Equal distances go to
 * the lower index, as numpy's argmin over the unsorted list. */
static int32_t nearest(const double *pts, const int32_t *index, int32_t n, const double q[3], double *d2)
{
    int32_t lo = 0, hi = n;
    while (lo < hi) {                                   /* first point with p0 >= q0 */
        const int32_t mid = lo + (hi - lo) / 2;
        if (pts[3 * mid] < q[0]) lo = mid + 1; else hi = mid;
    }
    double best_d = INFINITY;
    int32_t best = -1;
    for (int32_t i = lo; i < n; ++i) {
        const double a = pts[3 * i] - q[0];
        if (a * a > best_d) break;
        const double b = pts[3 * i + 1] - q[1], c = pts[3 * i + 2] - q[2];
        const double d = a * a + b * b + c * c;
        if (d < best_d || (d == best_d && index[i] < best)) { best_d = d; best = index[i]; }
    }
    for (int32_t i = lo - 1; i >= 0; --i) {
        const double a = pts[3 * i] - q[0];
        if (a * a > best_d) break;
        const double b = pts[3 * i + 1] - q[1], c = pts[3 * i + 2] - q[2];
        const double d = a * a + b * b + c * c;
        if (d < best_d || (d == best_d && index[i] < best)) { best_d = d; best = index[i]; }
    }
    *d2 = best_d;
    return best;
}

static inline int before(const costlearn_scored *x, const costlearn_scored *y)
{
    return x->score < y->score || (x->score == y->score && x->index < y->index);   /* ties: lower row first */
}

/* Offer e to best[0..*have), the `keep` best so far (by score, ties by row)
 * sorted: inserted in its place when it is among them. */
static inline void offer(costlearn_scored *best, int32_t *have, int32_t keep, costlearn_scored e)
{
    if (*have == keep && !before(&e, &best[keep - 1]))
        return;
    int32_t j = *have < keep ? (*have)++ : keep - 1;
    while (j > 0 && before(&e, &best[j - 1])) {
        best[j] = best[j - 1];
        --j;
    }
    best[j] = e;
}

/* The `keep` best of work[0..n) (by score, ties by row), sorted, into
 * work[0..keep): an insertion into a sorted prefix (n <= a few hundred). */
static void select_sorted(costlearn_scored *work, int32_t n, int32_t keep)
{
    int32_t have = 0;
    for (int32_t i = 0; i < n; ++i)
        offer(work, &have, keep, work[i]);             /* (writes at or below i: read already) */
}

static inline int64_t next_pow2(int64_t x)
{
    int64_t p = 1;
    while (p < x) p <<= 1;
    return p;
}

/* The candidates of problem (m, n, k) into ctx->row_cand (ascending); returns
 * how many and sets ctx->level and ctx->fits:
 *   - mask given: those with mask[c] != 0 (level 0);
 *   - else, with coverage (ctx->cov_lo != NULL): the tile configs whose block
 *     tile fits the problem (costlearn.space.tile_fits_problem with the
 *     family's minimum tile caps) and that were measured near it (lo <= log2 extent <= hi
 *     per extent), level 0; where none is, every fitting tile config, level
 *     1; where none fits, all, level 2; the vendor candidate (ctx->vendor >=
 *     0) always. The twin of Ranker.candidate_rule in ranker/base.py;
 *   - else: those that fit (level 0), or all when none does (level 2). */
static int32_t select_candidates(int64_t m, int64_t n, int64_t k, const double x[3], const uint8_t *mask,
                                 costlearn_ctx *ctx)
{
    const int32_t n_cands = ctx->n_cands, vendor = ctx->vendor;
    int32_t *row_cand = ctx->row_cand;
    int32_t rows = 0;
    ctx->level = 0;
    if (mask != NULL) {
        for (int32_t c = 0; c < n_cands; ++c)
            if (mask[c]) row_cand[rows++] = c;
        ctx->fits = 1;
        return rows;
    }
    int64_t cap_m = next_pow2(m), cap_n = next_pow2(n), cap_k = next_pow2(k);
    if (cap_m < ctx->min_cap_m) cap_m = ctx->min_cap_m;
    if (cap_n < ctx->min_cap_n) cap_n = ctx->min_cap_n;
    if (cap_k < ctx->min_cap_k) cap_k = ctx->min_cap_k;
    const int64_t *blk = ctx->block;
    uint8_t *fit = ctx->mask;
    for (int32_t c = 0; c < n_cands; ++c)
        fit[c] = blk[c] <= cap_m && blk[n_cands + c] <= cap_n && blk[2 * n_cands + c] <= cap_k;
    if (ctx->cov_lo == NULL) {
        for (int32_t c = 0; c < n_cands; ++c)
            if (fit[c]) row_cand[rows++] = c;
        ctx->fits = rows > 0;
        if (rows == 0) {
            ctx->level = 2;
            for (int32_t c = 0; c < n_cands; ++c) row_cand[rows++] = c;
        }
        return rows;
    }
    const double *lo = ctx->cov_lo, *hi = ctx->cov_hi;
    int32_t tiles = 0;
    for (int32_t c = 0; c < n_cands; ++c) {          /* branch-free: which candidates pass is data, not pattern */
        const int32_t tile = fit[c] & (c != vendor);
        const int32_t near = (lo[3 * c] <= x[0]) & (x[0] <= hi[3 * c]) & (lo[3 * c + 1] <= x[1])
                             & (x[1] <= hi[3 * c + 1]) & (lo[3 * c + 2] <= x[2]) & (x[2] <= hi[3 * c + 2]);
        tiles += tile;
        row_cand[rows] = c;
        rows += tile & near;
    }
    ctx->fits = 1;
    if (rows == 0 && tiles > 0) {
        ctx->level = 1;
        for (int32_t c = 0; c < n_cands; ++c)
            if (fit[c] && c != vendor) row_cand[rows++] = c;
    } else if (rows == 0) {
        ctx->level = 2;
        ctx->fits = 0;
        for (int32_t c = 0; c < n_cands; ++c) row_cand[rows++] = c;
        return rows;
    }
    if (vendor >= 0) {                                   /* the vendor, in its place */
        int32_t j = rows;
        while (j > 0 && row_cand[j - 1] > vendor) { row_cand[j] = row_cand[j - 1]; --j; }
        row_cand[j] = vendor;
        ++rows;
    }
    return rows;
}

/* Held-out evidence near the embedded query q (the floor's, costlearn/learn/holdout.py
 * VendorFloor.near): the ev_k nearest evidence problems, by squared distance
 * then index; the means of their log1p vendor regrets (finite ones only; NaN
 * when none) and log1p model regrets, summed in that order. The points are
 * sorted by their first coordinate (ev_index: each one's place in the
 * evidence's list), scanned outward from q's position as in nearest(): a side
 * stops once its first coordinate alone is further than the ev_k-th nearest
 * so far (a*a <= a*a + b*b + c*c in rounded doubles too, so no point passed
 * over could have been among them, nor tied with the last). */
static void evidence_near(const double q[3], costlearn_ctx *ctx)
{
    const int32_t n = ctx->n_ev;
    ctx->vendor_near = NAN;
    ctx->model_near = NAN;
    if (n <= 0)
        return;
    const double *pts = ctx->ev_points;
    const int32_t *index = ctx->ev_index;
    const int32_t kk = ctx->ev_k < n ? ctx->ev_k : n;
    if (kk < 1)                                         /* (VendorFloor refuses such a count) */
        return;
    costlearn_scored *best = ctx->ev_work;
    int32_t have = 0, lo = 0, hi = n;
    while (lo < hi) {                                   /* first point with p0 >= q0 */
        const int32_t mid = lo + (hi - lo) / 2;
        if (pts[3 * mid] < q[0]) lo = mid + 1; else hi = mid;
    }
    for (int32_t i = lo; i < n; ++i) {
        const double a = pts[3 * i] - q[0];
        if (have == kk && a * a > best[kk - 1].score) break;
        const double b = pts[3 * i + 1] - q[1], c = pts[3 * i + 2] - q[2];
        offer(best, &have, kk, (costlearn_scored){a * a + b * b + c * c, index[i]});
    }
    for (int32_t i = lo - 1; i >= 0; --i) {
        const double a = pts[3 * i] - q[0];
        if (have == kk && a * a > best[kk - 1].score) break;
        const double b = pts[3 * i + 1] - q[1], c = pts[3 * i + 2] - q[2];
        offer(best, &have, kk, (costlearn_scored){a * a + b * b + c * c, index[i]});
    }
    double sv = 0.0, sm = 0.0;
    int32_t nv = 0;
    for (int32_t i = 0; i < kk; ++i) {
        const double v = ctx->ev_vendor[best[i].index];
        if (isfinite(v)) { sv += v; ++nv; }
        sm += ctx->ev_model[best[i].index];
    }
    ctx->vendor_near = nv > 0 ? sv / nv : NAN;
    ctx->model_near = sm / kk;
}

/* The feature rows of row_cand[0..rows) into ctx->X, and their linear terms
 * into ctx->lin; returns ctx->lin or NULL when the scorer has none. */
static double *feature_rows(int64_t m, int64_t n, int64_t k, int32_t rows, costlearn_ctx *ctx)
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
static void partial_scores(int32_t rows, int32_t trees, const double *lin, costlearn_ctx *ctx)
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

/* Rank the candidates with the shortlist table (costlearn/model/shortlist.py,
 * the twin Shortlist.rank): the query's cell of the grid (step tab_step in
 * log2 of each extent), the lists of its 8 corners (up to tab_width entries,
 * -1 ends one) restricted to the candidates selected, each with the residual
 * (full score - score of the first tab_trees trees) of the nearest corner
 * that lists it (ties: the lower corner number); score = the first
 * tab_trees trees' score here + that residual. Returns the number ranked, or
 * -1 when the table does not answer (outside the grid, no candidate fits:
 * level 2, or fewer listed than min(top, selected)). */
static int32_t rank_table(int64_t m, int64_t n, int64_t k, const double x[3], int32_t rows, int32_t top,
                          costlearn_ctx *ctx)
{
    if (ctx->tab_index == NULL || ctx->level == 2)
        return -1;
    int64_t i0[3];
    double f[3];
    for (int j = 0; j < 3; ++j) {
        f[j] = x[j] / ctx->tab_step;
        i0[j] = (int64_t)floor(f[j]);
        if (i0[j] < 0 || i0[j] + 1 >= ctx->tab_n[j])
            return -1;
    }
    const int32_t n_cands = ctx->n_cands, width = ctx->tab_width;
    for (int corner = 0; corner < 8; corner += 2) {    /* the 8 corners' lists, fetched together: a query's
                                                          cells lie apart in a table of megabytes */
        const int64_t point = ((i0[0] + (corner >> 2 & 1)) * ctx->tab_n[1] + i0[1] + (corner >> 1 & 1))
                              * ctx->tab_n[2] + i0[2];
        PREFETCH(ctx->tab_index + point * width);
        PREFETCH(ctx->tab_index + (point + 2) * width - 1);
        PREFETCH(ctx->tab_resid + point * width);
        PREFETCH(ctx->tab_resid + (point + 2) * width - 1);
    }
    uint8_t *sel = ctx->mask;                          /* selected candidates, then: listed */
    memset(sel, 0, (size_t)n_cands);
    for (int32_t r = 0; r < rows; ++r)
        sel[ctx->row_cand[r]] = 1;
    double *seen = ctx->seen, *resid = ctx->resid;
    int32_t listed = 0;
    for (int corner = 0; corner < 8; ++corner) {
        const int64_t a = i0[0] + (corner >> 2 & 1), b = i0[1] + (corner >> 1 & 1), c = i0[2] + (corner & 1);
        const double da = f[0] - (double)a, db = f[1] - (double)b, dc = f[2] - (double)c;
        const double d2 = da * da + db * db + dc * dc;
        const int64_t point = (a * ctx->tab_n[1] + b) * ctx->tab_n[2] + c;
        const int16_t *idx = ctx->tab_index + point * width;
        const float *res = ctx->tab_resid + point * width;
        for (int32_t e = 0; e < width && idx[e] >= 0; ++e) {
            const int32_t cand = idx[e];
            if (cand >= n_cands || !sel[cand])
                continue;
            if (sel[cand] == 1) { sel[cand] = 2; ++listed; seen[cand] = d2; resid[cand] = (double)res[e]; }
            else if (d2 < seen[cand]) { seen[cand] = d2; resid[cand] = (double)res[e]; }
        }
    }
    const int64_t need = top < rows ? top : rows;
    if (listed < need)
        return -1;
    int32_t *row_cand = ctx->row_cand;
    int32_t kept = 0;
    for (int32_t c = 0; c < n_cands; ++c) {           /* branch-free, as in select_candidates */
        row_cand[kept] = c;
        kept += sel[c] == 2;
    }
    const double *lin = feature_rows(m, n, k, kept, ctx);
    partial_scores(kept, ctx->tab_trees, lin, ctx);
    costlearn_scored *work = ctx->work;
    for (int32_t r = 0; r < kept; ++r) {
        work[r].index = r;
        work[r].score = ctx->acc[r] + resid[row_cand[r]];
    }
    select_sorted(work, kept, kept);
    for (int32_t r = 0; r < kept; ++r) {
        ctx->out_index[r] = row_cand[work[r].index];
        ctx->out_score[r] = work[r].score;
    }
    return kept;
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

/* The vendor model's estimate for problem (m, n, k) whose log2 extents are
 * x (costlearn.model.vendor: problem_row, then VendorModel._moments): its
 * row (the extents' logs and aspects, their trailing zero bits capped at
 * v_pow2_cap, then the context's v_tail: the epilogue's flops and the layout
 * one-hot) rounded to float32, each member's trees summed in float64 plus
 * its base score, and the members' mean and standard deviation (math.fsum
 * sums; pow and sqrt of libm, as Python's float ** 2 and math.sqrt) into
 * ctx->v_mean, ctx->v_sd. */
static int32_t trailing_zeros(int64_t v, int32_t cap)
{
    int32_t z = 0;
    while (z < cap && (v & ((int64_t)1 << z)) == 0) ++z;
    return z;
}

static void vendor_estimate(int64_t m, int64_t n, int64_t k, const double x[3], costlearn_ctx *ctx)
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

/* The floor's decision for problem (m, n, k) ranked into out_index/out_score[0..got): the twin of
 * costlearn.serve.ood.OODVerdict.problem_reasons (whether the envelope, the held-out evidence flag the
 * problem and whether that sends it to the vendor) and costlearn.serve.vendor_policy.VendorPolicy.decide
 * (the tile or the vendor; the vendor model's doubt; beyond fl_near of every training shape, the
 * transfer: FAR), the same comparisons in the same order, and
 * whether the ranking's best time may beat the device's limits (TIME, set within NEAR_LIMIT of them:
 * Python's test compares against the exact integer 2*m*n*k). Writes
 * ctx->decision (DECIDED | OUTSIDE | UNSURE | DOUBT | TIME | FAR, chosen << 4 with 0 "predicted", 1 "vendor_floor",
 * 2 "ood_fallback", and (tile + 1) << 6: the place of the best tile config in the ranking, -1 where
 * the vendor is the only candidate ranked) and ctx->v_score, the vendor's score (its full score, every
 * tree, where the ranking left it out, as Ranker.rank of it alone). The words of each reason, and the
 * ratio, stay in Python. */
static void floor_decision(int64_t m, int64_t n, int64_t k, int32_t got, int32_t estimate, costlearn_ctx *ctx)
{
    const double mf = (double)m, nf = (double)n, kf = (double)k;   /* exact: extents < 2**31 */
    int32_t flags = DECIDED;
    if (!(sqrt(ctx->nearest_d2) <= ctx->env_threshold && ctx->env_lo[0] <= mf && mf <= ctx->env_hi[0]
          && ctx->env_lo[1] <= nf && nf <= ctx->env_hi[1] && ctx->env_lo[2] <= kf && kf <= ctx->env_hi[2]))
        flags |= OUTSIDE;
    if (got > 0 && (ctx->tr_peak > 0.0 || ctx->tr_bw > 0.0)) {   /* OODVerdict.time_reasons, conservatively */
        const double best_us = pow(2.0, ctx->out_score[0]);
        const double traffic = (double)((uint64_t)m * (uint64_t)k + (uint64_t)k * (uint64_t)n
                                        + (uint64_t)m * (uint64_t)n) * ctx->tr_elem;
        if ((ctx->tr_peak > 0.0 && best_us * ctx->tr_peak < 2.0 * mf * nf * kf * NEAR_LIMIT)
            || (ctx->tr_bw > 0.0 && traffic > ctx->tr_l2 && best_us * ctx->tr_bw < traffic * NEAR_LIMIT))
            flags |= TIME;
    }
    int32_t fallback = (flags & OUTSIDE) && ctx->fl_ood_fallback;
    double vendor_near = NAN;
    if (ctx->fl_uses_evidence) {
        vendor_near = expm1(ctx->vendor_near);
        const double model_near = expm1(ctx->model_near);
        if (model_near > ctx->fl_unsure_regret && isfinite(model_near)) {
            flags |= UNSURE;
            fallback = 1;
        }
    }
    const int32_t vi = ctx->vendor;
    int32_t chosen = 0, tile = 0;
    ctx->v_score = NAN;
    if (vi >= 0) {
        int32_t j = -1;
        for (int32_t r = 0; r < got; ++r)
            if (ctx->out_index[r] == vi) { j = r; break; }
        if (j >= 0) {
            ctx->v_score = ctx->out_score[j];
        } else {                                       /* the vendor alone, every tree */
            ctx->row_cand[0] = vi;
            const double *lin = feature_rows(m, n, k, 1, ctx);
            partial_scores(1, ctx->n_trees, lin, ctx);
            ctx->v_score = ctx->acc[0];
        }
        tile = ctx->out_index[0] != vi ? 0 : (got > 1 ? 1 : -1);
        if (tile < 0) {
            chosen = fallback ? 2 : 1;
        } else {
            /* VendorFloor.is_far: the transfer decides (NaN, inf: far) */
            const int32_t far = estimate && ctx->fl_est_on && ctx->fl_far_on && !(sqrt(ctx->nearest_d2) <= ctx->fl_near);
            if (far)
                flags |= FAR;
            else if (estimate) {                       /* estimate_doubt: sd / max(|mean|, 0.001) */
                const double a = fabs(ctx->v_mean);
                if (ctx->v_sd / (1e-3 > a ? 1e-3 : a) > ctx->fl_est_unsure)
                    flags |= DOUBT;
            }
            const double tile_lr = ctx->out_score[tile] - ctx->v_score;
            int32_t keeps;                              /* VendorFloor.keeps_vendor */
            if (!(tile_lr < -ctx->fl_margin))
                keeps = 1;
            else if (isfinite(vendor_near) && vendor_near <= ctx->fl_vendor_near_min)
                keeps = 1;
            else if (ctx->fl_est_on)
                keeps = !estimate || (far ? !(ctx->fl_far_a + ctx->fl_far_b * ctx->v_mean < -ctx->fl_est_margin)
                                          : !(ctx->v_mean + ctx->fl_est_z * ctx->v_sd < -ctx->fl_est_margin));
            else
                keeps = 0;
            chosen = fallback ? 2 : (keeps ? 1 : 0);
        }
    }
    ctx->decision = flags | chosen << 4 | (tile + 1) << 6;
}

/* Rank candidates for problem (m, n, k): the C twin of NumpyRanker.rank in
 * costlearn/ranker/numpy_ranker.py.
 *   1. the candidates (select_candidates);
 *   2. the nearest training shape (ctx->nearest, ctx->nearest_d2) and the
 *      held-out evidence near it (evidence_near);
 *   3. mode 2 with a shortlist table and no mask: rank_table, when it answers
 *      (ctx->used_table = 1); else on:
 *   4. their features: template rows, then the shape columns;
 *   5. scores: sign * (trees + base) + weight * X[column] + offsets[c]. With
 *      the cascade (mode >= 1), each stage s (trees[s], keep[s], margin[s]) that still has
 *      more live rows than keep = keep[s] + max(0, min(top, C) - 5) adds the
 *      trees up to trees[s] to the live rows' margins and keeps the `keep`
 *      best and every other row whose score is within margin[s] of the
 *      keep-th; the remaining trees then score the survivors. Margins: the
 *      first chunk of trees plus base, then each later chunk added;
 *   6. sorted by score, ties by row.
 * Writes the survivors best first to ctx->out_index (candidate numbers) and
 * ctx->out_score; returns how many. With the mode bit RANK_ESTIMATE and a
 * vendor model in the context (v_members > 0), also its estimate
 * (vendor_estimate: ctx->v_mean, ctx->v_sd; NaN otherwise). With the mode
 * bit RANK_DECIDE, no mask and a floor in the context (dec_on), also the
 * floor's decision (floor_decision: ctx->decision, ctx->v_score; 0
 * otherwise). */
static int32_t costlearn_rank(int64_t m, int64_t n, int64_t k, const uint8_t *mask, int32_t top, int32_t mode,
                              costlearn_ctx *ctx)
{
    const int32_t n_cands = ctx->n_cands, n_features = ctx->n_features, n_trees = ctx->n_trees;
    int32_t *row_cand = ctx->row_cand;
    const double x[3] = {log2((double)m), log2((double)n), log2((double)k)};   /* once per problem */
    const int32_t estimate = (mode & RANK_ESTIMATE) != 0 && ctx->v_members > 0;
    const int32_t decide = (mode & RANK_DECIDE) != 0 && ctx->dec_on && mask == NULL;
    mode &= ~(RANK_ESTIMATE | RANK_DECIDE);
    ctx->v_mean = NAN;
    ctx->v_sd = NAN;
    ctx->decision = 0;
    if (estimate)
        vendor_estimate(m, n, k, x, ctx);
    const int32_t rows = select_candidates(m, n, k, x, mask, ctx);
    ctx->used_table = 0;
    {   /* nearest training shape, for the OOD density check; the evidence near the query */
        double q[3];
        for (int j = 0; j < 3; ++j)
            q[j] = x[0] * ctx->embed[j] + x[1] * ctx->embed[3 + j] + x[2] * ctx->embed[6 + j];
        ctx->nearest_d2 = INFINITY;
        ctx->nearest = ctx->n_env > 0 ? nearest(ctx->env_points, ctx->env_index, ctx->n_env, q, &ctx->nearest_d2) : -1;
        evidence_near(q, ctx);
    }
    if (rows == 0)
        return 0;
    if (mode == 2 && mask == NULL) {                   /* the table lists the rule's candidates, not a caller's */
        const int32_t got = rank_table(m, n, k, x, rows, top, ctx);
        if (got >= 0) {
            ctx->used_table = 1;
            if (decide && got > 0)
                floor_decision(m, n, k, got, estimate, ctx);
            return got;
        }
        /* not answered: row_cand is as select_candidates left it (rank_table rewrites it only when it answers) */
    }
    const int32_t cascade = mode >= 1;
    float *X = ctx->X, *Xk = ctx->Xk;
    const size_t row_bytes = sizeof(float) * (size_t)n_features;
    double *lin = feature_rows(m, n, k, rows, ctx);
    const costlearn_node *nodes = (const costlearn_node *)ctx->nodes;
    const double base = ctx->base, sign = ctx->sign;
    double *acc = ctx->acc, *part = ctx->part;
    costlearn_scored *work = ctx->work;
    for (int32_t r = 0; r < rows; ++r) { work[r].index = r; work[r].score = 0.0; acc[r] = 0.0; }
    const int64_t need = top < n_cands ? top : n_cands;
    const int64_t extra = need > 5 ? need - 5 : 0;
    int32_t live = rows, done = 0;                     /* trees already in acc */
    const int32_t n_stages = (cascade && ctx->has_forest) ? ctx->n_stages : 0;
    for (int32_t st = 0; st <= n_stages; ++st) {
        const int32_t last = st < n_stages ? ctx->stage_trees[st] : n_trees;
        /* int64: a keep near 2**31 plus extra must not wrap (the scorer caps keep far below) */
        const int64_t keep = st < n_stages ? (int64_t)ctx->stage_keep[st] + extra : live;
        if (st < n_stages && (keep < 1 || live <= keep || last <= done || last >= n_trees))
            continue;                                  /* nothing to prune at this stage */
        if (ctx->has_forest && last > done) {
            const float *Xs = X;
            if (live < rows || done > 0) {             /* the live rows, in their current order */
                for (int32_t i = 0; i < live; ++i)
                    memcpy(Xk + (int64_t)i * n_features, X + (int64_t)work[i].index * n_features, row_bytes);
                Xs = Xk;
            }
            costlearn_forest_predict(nodes, ctx->roots + done, ctx->depths + done, last - done, Xs, live, n_features,
                                     part);
            for (int32_t i = 0; i < live; ++i) {
                const int32_t r = work[i].index;
                acc[r] = done == 0 ? part[i] + base : acc[r] + part[i];
            }
            done = last;
        }
        for (int32_t i = 0; i < live; ++i) {
            const int32_t r = work[i].index;
            double sc = ctx->has_forest ? sign * acc[r] : 0.0;
            if (lin != NULL) sc = sc + lin[r];
            work[i].score = sc;
        }
        if (keep < live) {
            /* the keep best, and the rest within the margin: with margins >= 0 (Scorer checks) and finite
             * scores, every row scoring at most the keep-th best's score + margin, in any order (a stage
             * sums each row alone, and the last sorts). The keep-th best from a copy, not a sort of all. */
            costlearn_scored *pick = ctx->pick;
            memcpy(pick, work, sizeof(costlearn_scored) * (size_t)live);
            select_sorted(pick, live, (int32_t)keep);
            const double limit = pick[keep - 1].score + ctx->stage_margin[st];
            int32_t cut = 0;
            for (int32_t i = 0; i < live; ++i)
                if (work[i].score <= limit)
                    work[cut++] = work[i];
            live = cut;
        } else {
            select_sorted(work, live, live);           /* the last stage: best first */
        }
    }
    for (int32_t r = 0; r < live; ++r) {
        ctx->out_index[r] = row_cand[work[r].index];
        ctx->out_score[r] = work[r].score;
    }
    if (decide && live > 0)
        floor_decision(m, n, k, live, estimate, ctx);
    return live;
}

/* costlearn_rank of the query in the context (q_m, q_n, q_k, q_mask, q_top,
 * q_mode; written by Python in one struct.pack_into: costlearn.ranker.native_structs.QUERY),
 * so that a ranking from Python converts one argument, not seven. */
int32_t costlearn_rank_query(costlearn_ctx *ctx)
{
    return costlearn_rank(ctx->q_m, ctx->q_n, ctx->q_k, ctx->q_mask, ctx->q_top, ctx->q_mode, ctx);
}

/* The shortlist table's lists at the grid points shapes[0..n_points) (m, n, k
 * each; the twin: costlearn.ranker.shortlist_build.build_lists_numpy): per point, where
 * some candidate fits (the candidate rule at level 0 or 1), the `tiles` best tile configs by
 * the cascaded full scores (mode 1) and the vendor candidate, each with its
 * residual (full score - score of the first ctx->tab_trees trees); -1 ends a
 * shorter list (every entry -1 where none fits: level 2).
 * out_index, out_resid: [n_points x width], width = tiles + (vendor >= 0).
 * Returns 0, or -1 on a bad argument. */
int32_t costlearn_shortlist_build(const int64_t *shapes, int32_t n_points, int32_t tiles, int32_t width,
                                  costlearn_ctx *ctx, int16_t *out_index, float *out_resid)
{
    if (tiles < 1 || width != tiles + (ctx->vendor >= 0) || ctx->n_cands > 32767)
        return -1;
    const int32_t vendor = ctx->vendor;
    for (int32_t p = 0; p < n_points; ++p) {
        int16_t *idx = out_index + (int64_t)p * width;
        float *res = out_resid + (int64_t)p * width;
        for (int32_t e = 0; e < width; ++e) { idx[e] = -1; res[e] = 0.0f; }
        const int64_t m = shapes[3 * p], n = shapes[3 * p + 1], k = shapes[3 * p + 2];
        const int32_t got = costlearn_rank(m, n, k, NULL, tiles + (vendor >= 0), 1, ctx);
        if (ctx->level == 2 || got <= 0)
            continue;
        /* the list: the best tiles in rank order, then the vendor; their full scores */
        int32_t *row_cand = ctx->row_cand;
        double *full = ctx->seen;                      /* scratch: full score per list entry */
        int32_t len = 0, vendor_at = -1;
        for (int32_t r = 0; r < got && len < tiles; ++r) {
            const int32_t c = ctx->out_index[r];
            if (c == vendor) { vendor_at = r; continue; }
            idx[len] = (int16_t)c;
            full[len++] = ctx->out_score[r];
        }
        if (vendor >= 0) {
            if (vendor_at < 0) {                       /* not among the survivors: score it alone, every tree */
                uint8_t *only = ctx->mask;
                memset(only, 0, (size_t)ctx->n_cands);
                only[vendor] = 1;
                costlearn_rank(m, n, k, only, 1, 0, ctx);
                full[len] = ctx->out_score[0];
                ctx->level = 0;
            } else {
                full[len] = ctx->out_score[vendor_at];
            }
            idx[len++] = (int16_t)vendor;
        }
        for (int32_t e = 0; e < len; ++e)
            row_cand[e] = idx[e];
        const double *lin = feature_rows(m, n, k, len, ctx);
        partial_scores(len, ctx->tab_trees, lin, ctx);
        for (int32_t e = 0; e < len; ++e)
            res[e] = (float)(full[e] - ctx->acc[e]);
    }
    return 0;
}

/* costlearn_rank (mask NULL) for problems mnk[0..n_problems) (m, n, k each), one
 * after another; per problem p: count[p] ranked (at most `width` kept), their
 * candidates and scores in index[p * width ...], score[p * width ...], and
 * nearest[p], nearest_d2[p], level[p], vendor_near[p], model_near[p],
 * used_table[p], v_mean[p], v_sd[p], decision[p], v_score[p]. Returns 0. */
int32_t costlearn_rank_many(const int64_t *mnk, int32_t n_problems, int32_t top, int32_t width, int32_t mode,
                            costlearn_ctx *ctx,
                            int32_t *count, int32_t *index, double *score, int32_t *nearest_out, double *nearest_d2,
                            int32_t *level, double *vendor_near, double *model_near, int32_t *used_table,
                            double *v_mean, double *v_sd, int32_t *decision, double *v_score)
{
    for (int32_t p = 0; p < n_problems; ++p) {
        const int32_t got = costlearn_rank(mnk[3 * p], mnk[3 * p + 1], mnk[3 * p + 2], NULL, top, mode, ctx);
        const int32_t keep = got < width ? got : width;
        count[p] = keep;
        for (int32_t r = 0; r < keep; ++r) {
            index[(int64_t)p * width + r] = ctx->out_index[r];
            score[(int64_t)p * width + r] = ctx->out_score[r];
        }
        nearest_out[p] = ctx->nearest;
        nearest_d2[p] = ctx->nearest_d2;
        level[p] = ctx->level;
        vendor_near[p] = ctx->vendor_near;
        model_near[p] = ctx->model_near;
        used_table[p] = ctx->used_table;
        v_mean[p] = ctx->v_mean;
        v_sd[p] = ctx->v_sd;
        decision[p] = ctx->decision;
        v_score[p] = ctx->v_score;
    }
    return 0;
}

/* sizeof(costlearn_node), sizeof(costlearn_scored), sizeof(costlearn_ctx), then the offset of every
 * field of costlearn_ctx in declaration order (COSTLEARN_CTX_OFFSETS, from the
 * generated header); returns how many values it would write. */
int32_t costlearn_layout(int64_t *out, int32_t n)
{
    const int64_t values[] = {(int64_t)sizeof(costlearn_node), (int64_t)sizeof(costlearn_scored),
                              (int64_t)sizeof(costlearn_ctx), COSTLEARN_CTX_OFFSETS};
    const int32_t count = (int32_t)(sizeof(values) / sizeof(values[0]));
    for (int32_t i = 0; i < count && i < n; ++i)
        out[i] = values[i];
    return count;
}

#ifndef COSTLEARN_SOURCE_SHA256
#error "compile with -DCOSTLEARN_SOURCE_SHA256=\"...\" (setup.py; costlearn/ranker/_build.py: source_sha256)"
#endif

/* The sha256 of this source and the header it was built with (costlearn/ranker/_build.py: source_sha256). */
const char *costlearn_source_sha256(void)
{
    return COSTLEARN_SOURCE_SHA256;
}
