/* costlearn's ranker in C, loaded by costlearn/ranker/native.py:
 *
 *   costlearn_forest_predict   a tree ensemble over a small batch of rows
 *   costlearn_shape_features   the 18 shape-dependent features
 *   costlearn_rank             a whole ranking: fit mask, features, nearest
 *                              training shape, cascaded scoring, sort
 *   costlearn_layout           sizes and field offsets of the structs, checked at load
 *
 * The structs costlearn_node and costlearn_ctx are not written here: they are
 * generated from their one definition in Python (costlearn/ranker/native.py:
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
 * so a tree of depth D is walked in exactly D branch-free steps. Decision
 * rule: the first child when x < value, the second otherwise (a NaN goes to
 * the second; feature rows are NaN-free by the FeatureSet contract). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "costlearn_structs.h"

#define STEP(i, b) do {                                                                      \
        const costlearn_node nd = nodes[(b) + (i)];                                          \
        (i) = nd.child + (!(x[nd.feature] < nd.value) & nd.flags & 1);                       \
    } while (0)

static inline int32_t max2(int32_t a, int32_t b) { return a > b ? a : b; }

/* out[r] = sum over trees of the leaf value reached by row r (no base score),
 * summed in float64 in tree order. X: n_rows x n_features, row-major float32.
 * Tree-major: eight trees at a time, every row walks those eight (eight
 * independent chains of dependent loads), so each tree's nodes come into the
 * cache once per call, not once per row. */
int32_t costlearn_forest_predict(const costlearn_node *nodes, const int32_t *roots, const int32_t *depths,
                                 int32_t n_trees, const float *X, int32_t n_rows, int32_t n_features, double *out)
{
    if (n_rows < 0 || n_trees < 0)
        return -1;
    for (int32_t r = 0; r < n_rows; ++r)
        out[r] = 0.0;
    int32_t t = 0;
    for (; t + 8 <= n_trees; t += 8) {
        const int32_t b0 = roots[t], b1 = roots[t + 1], b2 = roots[t + 2], b3 = roots[t + 3];
        const int32_t b4 = roots[t + 4], b5 = roots[t + 5], b6 = roots[t + 6], b7 = roots[t + 7];
        const int32_t depth = max2(max2(max2(depths[t], depths[t + 1]), max2(depths[t + 2], depths[t + 3])),
                                   max2(max2(depths[t + 4], depths[t + 5]), max2(depths[t + 6], depths[t + 7])));
        for (int32_t r = 0; r < n_rows; ++r) {
            const float *x = X + (int64_t)r * n_features;
            int32_t i0 = 0, i1 = 0, i2 = 0, i3 = 0, i4 = 0, i5 = 0, i6 = 0, i7 = 0;
            for (int32_t d = 0; d < depth; ++d) {
                STEP(i0, b0); STEP(i1, b1); STEP(i2, b2); STEP(i3, b3);
                STEP(i4, b4); STEP(i5, b5); STEP(i6, b6); STEP(i7, b7);
            }
            double acc = out[r];
            acc += nodes[b0 + i0].value; acc += nodes[b1 + i1].value; acc += nodes[b2 + i2].value;
            acc += nodes[b3 + i3].value; acc += nodes[b4 + i4].value; acc += nodes[b5 + i5].value;
            acc += nodes[b6 + i6].value; acc += nodes[b7 + i7].value;
            out[r] = acc;
        }
    }
    for (; t < n_trees; ++t) {
        const int32_t b = roots[t];
        for (int32_t r = 0; r < n_rows; ++r) {
            const float *x = X + (int64_t)r * n_features;
            int32_t i = 0;
            for (int32_t d = 0; d < depths[t]; ++d)
                STEP(i, b);
            out[r] += nodes[b + i].value;
        }
    }
    return 0;
}

#undef STEP

/* The 18 shape-dependent features (SHAPE_FEATURES in costlearn/features/base.py),
 * for the candidates rows[0..n_rows), into row r of X; cols[j] is the column
 * of feature j, or -1 to skip it. Every expression mirrors
 * costlearn.features.analytic.shape_arrays (same operations, same order).
 * Per candidate c: block[c], block[C + c], block[2C + c] are BM, BN, KS;
 * slots[c] = blocks per MP x MPs; tile_occ[c] = min(1, 4 x occupancy);
 * fill[c] = panel loads before the first multiply. s: element bytes; peak:
 * flop per us; bw: bytes per us. */
void costlearn_shape_features(int64_t m, int64_t n, int64_t k, const int32_t *rows, int32_t n_rows,
                              int32_t n_cands, const int64_t *block, const int64_t *slots, const double *tile_occ,
                              const double *fill, double s, double peak, double bw, const int32_t *cols,
                              float *X, int32_t n_features)
{
    const double mf = (double)m, nf = (double)n, kf = (double)k;
    const double flops = 2.0 * mf * nf * kf;
    const double abc = s * (mf * kf + kf * nf + mf * nf);
    const double memory_us = abc / bw;
    /* The features of the problem alone, once (the same values for every row). */
    const double l2m = log2(mf), l2n = log2(nf), l2k = log2(kf), l2flops = log2(flops), ai = flops / abc;
    const double l2memory = log2(memory_us);
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
        const double v[18] = {
            l2m, l2n, l2k, l2flops, ai,
            log2((double)blocks), waves, last_fill, util, (double)k_steps, fill[c] / (double)k_steps, waste,
            l2compute, l2memory, l2tiled, l2roof, l2corrected,
            compute_us >= memory_us ? 1.0 : 0.0,
        };
        float *row = X + (int64_t)r * n_features;
        for (int j = 0; j < 18; ++j)
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

/* The `keep` best of work[0..n) (by score, ties by row), sorted, into
 * work[0..keep): an insertion into a sorted prefix (n <= a few hundred). */
static void select_sorted(costlearn_scored *work, int32_t n, int32_t keep)
{
    int32_t have = 0;
    for (int32_t i = 0; i < n; ++i) {
        const costlearn_scored e = work[i];
        if (have == keep && !before(&e, &work[have - 1]))
            continue;
        int32_t j = have < keep ? have++ : have - 1;
        while (j > 0 && before(&e, &work[j - 1])) {
            work[j] = work[j - 1];
            --j;
        }
        work[j] = e;
    }
}

static inline int64_t next_pow2(int64_t x)
{
    int64_t p = 1;
    while (p < x) p <<= 1;
    return p;
}

/* Rank candidates for problem (m, n, k): the C twin of NumpyRanker.rank in
 * costlearn/ranker/numpy_ranker.py.
 *   1. the candidates: those with mask[c] != 0, or (mask NULL) those whose
 *      block tile fits the problem (costlearn.space.tile_fits_problem with the
 *      family's floors), or all of them when none fits (ctx->fits = 0);
 *   2. their features: template rows, then the shape columns;
 *   3. the nearest training shape (ctx->nearest, ctx->nearest_d2);
 *   4. scores: sign * (trees + base) + weight * X[column] + offsets[c]. With
 *      the cascade, each stage s (trees[s], keep[s], margin[s]) that still has
 *      more live rows than keep = keep[s] + max(0, min(top, C) - 5) adds the
 *      trees up to trees[s] to the live rows' margins and keeps the `keep`
 *      best and every other row whose score is within margin[s] of the
 *      keep-th; the remaining trees then score the survivors. Margins: the
 *      first chunk of trees plus base, then each later chunk added;
 *   5. sorted by score, ties by row.
 * Writes the survivors best first to ctx->out_index (candidate numbers) and
 * ctx->out_score; returns how many. */
int32_t costlearn_rank(int64_t m, int64_t n, int64_t k, const uint8_t *mask, int32_t top, int32_t cascade,
                       costlearn_ctx *ctx)
{
    const int32_t n_cands = ctx->n_cands, n_features = ctx->n_features, n_trees = ctx->n_trees;
    int32_t *row_cand = ctx->row_cand;
    int32_t rows = 0;
    if (mask != NULL) {
        for (int32_t c = 0; c < n_cands; ++c)
            if (mask[c]) row_cand[rows++] = c;
        ctx->fits = 1;
    } else {
        int64_t cap_m = next_pow2(m), cap_n = next_pow2(n), cap_k = next_pow2(k);
        if (cap_m < ctx->floor_m) cap_m = ctx->floor_m;
        if (cap_n < ctx->floor_n) cap_n = ctx->floor_n;
        if (cap_k < ctx->floor_k) cap_k = ctx->floor_k;
        const int64_t *blk = ctx->block;
        for (int32_t c = 0; c < n_cands; ++c)
            if (blk[c] <= cap_m && blk[n_cands + c] <= cap_n && blk[2 * n_cands + c] <= cap_k)
                row_cand[rows++] = c;
        ctx->fits = rows > 0;
        if (rows == 0)
            for (int32_t c = 0; c < n_cands; ++c) row_cand[rows++] = c;
    }
    {   /* nearest training shape, for the OOD density check */
        const double x0 = log2((double)m), x1 = log2((double)n), x2 = log2((double)k);
        double q[3];
        for (int j = 0; j < 3; ++j)
            q[j] = x0 * ctx->embed[j] + x1 * ctx->embed[3 + j] + x2 * ctx->embed[6 + j];
        ctx->nearest_d2 = INFINITY;
        ctx->nearest = ctx->n_env > 0 ? nearest(ctx->env_points, ctx->env_index, ctx->n_env, q, &ctx->nearest_d2) : -1;
    }
    if (rows == 0)
        return 0;
    float *X = ctx->X, *Xk = ctx->Xk;
    const size_t row_bytes = sizeof(float) * (size_t)n_features;
    for (int32_t r = 0; r < rows; ++r)
        memcpy(X + (int64_t)r * n_features, ctx->template_ + (int64_t)row_cand[r] * n_features, row_bytes);
    costlearn_shape_features(m, n, k, row_cand, rows, n_cands, ctx->block, ctx->slots, ctx->tile_occ, ctx->fill,
                             ctx->s, ctx->peak, ctx->bw, ctx->cols, X, n_features);
    double *lin = NULL;
    if (ctx->column >= 0 || ctx->offsets != NULL) {
        lin = ctx->lin;
        for (int32_t r = 0; r < rows; ++r) {
            double v = 0.0;
            int have = 0;
            if (ctx->column >= 0) { v = ctx->column_weight * (double)X[(int64_t)r * n_features + ctx->column]; have = 1; }
            if (ctx->offsets != NULL) { v = have ? v + ctx->offsets[row_cand[r]] : ctx->offsets[row_cand[r]]; }
            lin[r] = v;
        }
    }
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
        select_sorted(work, live, live);
        if (keep < live) {                             /* the keep best, and the rest within the margin */
            const double limit = work[keep - 1].score + ctx->stage_margin[st];
            int32_t cut = (int32_t)keep;
            while (cut < live && work[cut].score <= limit)
                ++cut;
            live = cut;
        }
    }
    for (int32_t r = 0; r < live; ++r) {
        ctx->out_index[r] = row_cand[work[r].index];
        ctx->out_score[r] = work[r].score;
    }
    return live;
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
