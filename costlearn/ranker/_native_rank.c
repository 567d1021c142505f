/* costlearn's ranker in C (costlearn/ranker/_native.h lists its files): one
 * problem's ranking, costlearn_rank (the twin of NumpyRanker.rank): the
 * candidate rule (select_candidates), the nearest training shape (nearest),
 * the held-out evidence near it (evidence_near), the cascade, and the floor's
 * decision (floor_decision); its entries for the query in a context
 * (costlearn_rank_query) and for many problems (costlearn_rank_many); and the
 * build's checks at load (costlearn_layout, costlearn_source_sha256). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "_native.h"

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

/* The nearest training shape to the query whose log2 extents are x, for the
 * OOD density check (ctx->nearest, ctx->nearest_d2: -1 and inf without an
 * envelope), and the held-out evidence near it (evidence_near): both in the
 * embedded space (ctx->embed). */
static void locate(const double x[3], costlearn_ctx *ctx)
{
    double q[3];
    for (int j = 0; j < 3; ++j)
        q[j] = x[0] * ctx->embed[j] + x[1] * ctx->embed[3 + j] + x[2] * ctx->embed[6 + j];
    ctx->nearest_d2 = INFINITY;
    ctx->nearest = ctx->n_env > 0 ? nearest(ctx->env_points, ctx->env_index, ctx->n_env, q, &ctx->nearest_d2) : -1;
    evidence_near(q, ctx);
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
int32_t costlearn_rank(int64_t m, int64_t n, int64_t k, const uint8_t *mask, int32_t top, int32_t mode,
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
    locate(x, ctx);
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

/* The sha256 of the sources and headers this library was built from (costlearn/ranker/_build.py:
 * source_sha256, over every file of EXTENSIONS["_native"] and HEADERS). */
const char *costlearn_source_sha256(void)
{
    return COSTLEARN_SOURCE_SHA256;
}
