/* What the C files of costlearn's ranker share: the one shared library
 * costlearn.ranker._native (loaded by costlearn/ranker/native_library.py),
 * compiled from
 *
 *   _native_score.c      the scores: the tree ensemble, the shape features,
 *                        a context's feature rows and their scores, the
 *                        vendor model's estimate
 *   _native_rank.c       one problem's ranking: the candidate rule, the
 *                        nearest training shape, the held-out evidence, the
 *                        cascade, the floor's decision; the entries for one
 *                        and many problems, the build's checks
 *   _native_shortlist.c  the shortlist table: its query and its lists
 *
 * Its entries (the functions native_library.py declares; nothing else is
 * exported):
 *
 *   costlearn_forest_predict   a tree ensemble over a small batch of rows
 *   costlearn_sentinel_leaves  a forest's nodes as costlearn_forest_predict walks them
 *   costlearn_shape_features   the 23 shape-dependent features
 *   costlearn_fsum             math.fsum: the correctly rounded sum
 *   costlearn_rank_query       a whole ranking (costlearn_rank of the query in the
 *                              context): candidate rule, features, nearest
 *                              training shape, held-out evidence, cascaded or
 *                              shortlist-table scoring, sort, and (mode bit
 *                              RANK_ESTIMATE) the vendor model's estimate
 *   costlearn_rank_many        costlearn_rank for many problems in one call
 *   costlearn_shortlist_build  the shortlist table's lists at grid points
 *   costlearn_layout           sizes and field offsets of the structs, checked at load
 *   costlearn_source_sha256    what this build was compiled from, checked at load
 *
 * Built by the package build (setup.py; costlearn/ranker/_build.py, whose
 * EXTENSIONS lists the files and HEADERS this header), not at run time.
 * The structs costlearn_node and costlearn_ctx are not written here: they are
 * generated from their one definition in Python (costlearn/ranker/native_structs.py:
 * NODE_DTYPE of costlearn.model.forest, RankContext) into costlearn_structs.h.
 *
 * Each function has a numpy twin that gives the same bits (tests compare them):
 * FlatForest.partial_sum_numpy, features.analytic.shape_arrays,
 * Envelope.nearest, NumpyRanker.rank. Compiled with -ffp-contract=off so that
 * floating-point expressions are evaluated exactly as written, in the order
 * numpy evaluates them. */
#ifndef COSTLEARN_NATIVE_H
#define COSTLEARN_NATIVE_H

#include <stdint.h>

#include "costlearn_structs.h"

/* A function one file defines and another calls, kept out of the library's
 * exported symbols (the entries above are the only ones). */
#if defined(__GNUC__) || defined(__clang__)
#define COSTLEARN_INTERNAL __attribute__((visibility("hidden")))
#else
#define COSTLEARN_INTERNAL
#endif

/* Defined in _native_score.c (each function's comment is at its definition) */
int32_t costlearn_forest_predict(const costlearn_node *nodes, const int32_t *roots, const int32_t *depths,
                                 int32_t n_trees, const float *X, int32_t n_rows, int32_t n_features, double *out);
COSTLEARN_INTERNAL double *feature_rows(int64_t m, int64_t n, int64_t k, int32_t rows, costlearn_ctx *ctx);
COSTLEARN_INTERNAL void partial_scores(int32_t rows, int32_t trees, const double *lin, costlearn_ctx *ctx);
COSTLEARN_INTERNAL void vendor_estimate(int64_t m, int64_t n, int64_t k, const double x[3], costlearn_ctx *ctx);

/* Defined in _native_rank.c */
COSTLEARN_INTERNAL int32_t costlearn_rank(int64_t m, int64_t n, int64_t k, const uint8_t *mask, int32_t top,
                                          int32_t mode, costlearn_ctx *ctx);

/* Defined in _native_shortlist.c */
COSTLEARN_INTERNAL int32_t rank_table(int64_t m, int64_t n, int64_t k, const double x[3], int32_t rows, int32_t top,
                                      costlearn_ctx *ctx);

/* The ranking's order and the choice of the best few (the cascade's stages,
 * the shortlist table's ranking, the held-out evidence's nearest): by score,
 * ties by row. */
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
static inline void select_sorted(costlearn_scored *work, int32_t n, int32_t keep)
{
    int32_t have = 0;
    for (int32_t i = 0; i < n; ++i)
        offer(work, &have, keep, work[i]);             /* (writes at or below i: read already) */
}

#endif
