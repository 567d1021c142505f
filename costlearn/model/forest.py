"""A trained tree ensemble as flat arrays: the compiled scorer a gradient-
boosted cost model exports, evaluated by the ranker in C
(``costlearn_forest_predict`` in ``costlearn/ranker/_native_score.c``) or by its
numpy twin :meth:`FlatForest.partial_sum_numpy`, which gives the same bits.

Layout (:data:`NODE_DTYPE`, 8 bytes a node): the two children of a node are
adjacent, ``child`` and ``child + 1``, as offsets from the tree's root; a
leaf points to itself and keeps its value in ``value`` (an internal node
keeps its threshold there). A tree of depth D is then walked in exactly D
branch-free steps, and 60,000 nodes take 480 KB.

Decision rule: the first child when ``x < value``, the second otherwise (a
NaN goes to the second: feature rows are NaN-free by the FeatureSet
contract, so a training library's default direction for missing values never
applies). Leaf values are float32 and are summed in float64, tree by tree in
order, on top of ``base_score``.

Why not the training library: on one problem's batch of candidates,
XGBoost's ``Booster.inplace_predict`` (dominated by per-call set-up),
treelite's GTIL and a tl2cgen-compiled library each take many times the
predictor's budget, 25 us for features, trees and the nearest-shape search
together.
"""
from __future__ import annotations

import hashlib
import json

import numpy as np

from costlearn.core.errors import CostlearnError

__all__ = ["FlatForest", "ForestError", "NODE_DTYPE", "FLAG_INTERNAL"]

NODE_DTYPE = np.dtype([("value", "<f4"), ("child", "<u2"), ("feature", "u1"), ("flags", "u1")])
"""Layout of ``costlearn_node`` (8 bytes); the C declaration is generated
from it (:func:`costlearn.ranker.native_structs.c_header`)."""

FLAG_INTERNAL = 1

SCORE_LIMIT_LOG2 = 512.0
"""Largest |base score| + sum over trees of the tree's largest |leaf value| a
forest may have, doublings: its scores (log2 microseconds for a log-time model, whose
trained forests stay within a few dozen) then keep ``2.0 ** score`` finite.
A file beyond it is damaged or hostile and is refused (leaf values of 1e30
with the sha256 updated would otherwise make ``predict_best`` raise a bare
OverflowError)."""


class ForestError(CostlearnError, ValueError):
    """A model cannot be flattened (not a single-output tree ensemble, a tree
    of more than 65,536 nodes, a feature index above 255), or flat arrays are
    inconsistent."""


class FlatForest:
    """A tree ensemble as flat arrays.

    Parameters
    ----------
    nodes : ndarray of :data:`NODE_DTYPE`, shape (total nodes,)
    roots, depths : ndarray of int32, shape (trees,)
        First node and depth (steps from root to the deepest leaf) per tree.
    base_score : float
        Added to the sum of leaves (the margin's intercept).
    n_features : int
        Width of the feature rows.
    checked : bool
        True only where these exact arrays are known to pass
        :meth:`validate` (a file whose sha256 passed it before:
        :func:`costlearn.model.artifact.load`); the check is then skipped.

    Raises
    ------
    ForestError
        If the arrays are inconsistent (:meth:`validate`).
    """

    def __init__(self, nodes, roots, depths, base_score: float, n_features: int, checked: bool = False):
        self.nodes = np.ascontiguousarray(nodes, NODE_DTYPE)
        self.roots = np.ascontiguousarray(roots, np.int32)
        self.depths = np.ascontiguousarray(depths, np.int32)
        self.base_score = float(base_score)
        self.n_features = int(n_features)
        if not checked:
            self.validate()

    # -- construction ----------------------------------------------------

    @classmethod
    def from_trees(cls, trees, base_score: float, n_features: int) -> "FlatForest":
        """Flatten trees given in a library-neutral form.

        Parameters
        ----------
        trees : iterable of dict
            Per tree, arrays over its nodes (node 0 is the root): ``first``
            and ``second`` (child indices, -1 at a leaf), ``feature`` (int),
            ``threshold`` (float32: the first child when x < threshold),
            ``value`` (float32, the leaf value; ignored at internal nodes).
        base_score : float
        n_features : int

        Raises
        ------
        ForestError
            If a tree has more than 65,536 nodes or a feature index is
            outside [0, min(n_features, 256)).
        """
        nodes, roots, depths = [], [], []
        offset = 0
        for t, tree in enumerate(trees):
            first = np.asarray(tree["first"], np.int64)
            second = np.asarray(tree["second"], np.int64)
            if len(first) > 65536:
                raise ForestError(f"tree {t} has {len(first)} nodes; the flat layout holds at most 65,536")
            # Breadth-first relabelling, a level at a time: the two children of
            # a node get adjacent slots.
            levels, frontier = [np.zeros(1, np.int64)], np.zeros(1, np.int64)
            while True:
                inner = frontier[first[frontier] != -1]
                if not len(inner):
                    break
                frontier = np.stack([first[inner], second[inner]], axis=1).ravel()
                levels.append(frontier)
            order = np.concatenate(levels)
            new = np.empty(len(first), np.int64)
            new[order] = np.arange(len(order))
            leaf = first[order] == -1
            feat = np.where(leaf, 0, np.asarray(tree["feature"], np.int64)[order])
            if (feat < 0).any() or (feat >= min(n_features, 256)).any():
                raise ForestError(f"tree {t} splits on feature {int(feat.max())}; the model has {n_features} "
                                  "features and the flat layout at most 256")
            arr = np.zeros(len(order), NODE_DTYPE)
            arr["value"] = np.where(leaf, np.asarray(tree["value"], np.float32)[order],
                                    np.asarray(tree["threshold"], np.float32)[order])
            arr["child"] = np.where(leaf, np.arange(len(order)), new[np.where(leaf, 0, first[order])])
            arr["feature"] = feat
            arr["flags"] = np.where(leaf, 0, FLAG_INTERNAL)
            nodes.append(arr)
            roots.append(offset)
            depths.append(len(levels) - 1)
            offset += len(order)
        if not nodes:
            return cls(np.zeros(0, NODE_DTYPE), np.zeros(0, np.int32), np.zeros(0, np.int32), base_score,
                       n_features)
        return cls(np.concatenate(nodes), roots, depths, base_score, n_features)

    @classmethod
    def from_xgboost(cls, booster) -> "FlatForest":
        """Flatten a trained ``xgboost.Booster`` (all its trees).

        Raises
        ------
        ForestError
            If the booster is not a ``gbtree`` with one output and one tree
            per round.
        """
        model = json.loads(booster.save_raw("json"))
        learner = model["learner"]
        gb = learner["gradient_booster"]
        if gb.get("name") != "gbtree":
            raise ForestError(f"booster type {gb.get('name')!r}; only 'gbtree' can be flattened")
        param = learner["learner_model_param"]
        if int(param.get("num_target", 1)) != 1 or int(param.get("num_class", 0)) > 1:
            raise ForestError("only single-output boosters can be flattened")
        if int(gb["model"]["gbtree_model_param"].get("num_parallel_tree", 1)) != 1:
            raise ForestError("boosted random forests (num_parallel_tree > 1) cannot be flattened")
        base = param["base_score"]
        base = float(json.loads(base)[0] if base.startswith("[") else base)
        trees = []
        for tree in gb["model"]["trees"]:
            cond = np.asarray(tree["split_conditions"], np.float32)
            trees.append(dict(first=tree["left_children"], second=tree["right_children"],
                              feature=tree["split_indices"], threshold=cond, value=cond))
        return cls.from_trees(trees, base, int(param["num_feature"]))

    def specialize(self, fixed: dict, n_features: int) -> "FlatForest":
        """This forest with the features of ``fixed`` held at constant values
        (partial evaluation): every split on one of them is replaced by the
        branch that value takes, so the result reads only the other
        features and gives the same bits as this forest on rows that carry
        those values.

        Used to serve a model trained on several devices' rows for one
        device: its device descriptors are constants there
        (:mod:`costlearn.features.device`).

        Parameters
        ----------
        fixed : dict of int to float
            Feature index -> value (compared as float32, as the walk does).
        n_features : int
            Width of the new forest's rows: the fixed features must be the
            last columns, ``n_features <= min(fixed)``, so that the others
            keep their indices.

        Returns
        -------
        FlatForest

        Raises
        ------
        ForestError
            If a fixed index is below ``n_features`` or beyond this forest's
            width, or a split is left on a feature >= ``n_features``.
        """
        fixed = {int(i): np.float32(v) for i, v in fixed.items()}
        if fixed and (min(fixed) < n_features or max(fixed) >= self.n_features):
            raise ForestError(f"fixed features {sorted(fixed)} must lie in [{n_features}, {self.n_features})")
        is_fixed = np.zeros(256, bool)
        value_of = np.zeros(256, np.float32)
        for i, v in fixed.items():
            is_fixed[i], value_of[i] = True, v
        ends = np.r_[self.roots[1:], len(self.nodes)].astype(np.int64)
        trees = []
        for root, end in zip(self.roots.astype(np.int64), ends):
            nd = self.nodes[root:end]
            internal = (nd["flags"] & FLAG_INTERNAL) != 0
            child = nd["child"].astype(np.int64)
            skip = internal & is_fixed[nd["feature"]]
            taken = child + ~(value_of[nd["feature"]] < nd["value"])     # the branch a fixed value takes
            resolved = np.arange(len(nd))
            while True:                                     # follow fixed splits until a kept node or a leaf
                nxt = np.where(skip[resolved], taken[resolved], resolved)
                if np.array_equal(nxt, resolved):
                    break
                resolved = nxt
            # the kept nodes reachable from the (resolved) root, root first
            keep, frontier = [], np.array([resolved[0]])
            while len(frontier):
                keep.append(frontier)
                inner = frontier[internal[frontier]]
                frontier = np.stack([resolved[child[inner]], resolved[child[inner] + 1]], axis=1).ravel()
            order = np.concatenate(keep)
            index = np.full(len(nd), -1, np.int64)
            index[order] = np.arange(len(order))
            inner = internal[order]
            trees.append(dict(first=np.where(inner, index[resolved[child[order]]], -1),
                              second=np.where(inner, index[resolved[np.minimum(child[order] + 1, len(nd) - 1)]], -1),
                              feature=nd["feature"][order].astype(np.int64), threshold=nd["value"][order],
                              value=nd["value"][order]))
        return FlatForest.from_trees(trees, self.base_score, n_features)

    # -- checks ----------------------------------------------------------

    def validate(self) -> None:
        """Check the arrays are a forest both walks agree on: every index a
        walk follows stays inside its tree (a damaged file must not make the C
        walk read out of bounds), every leaf points to itself, every declared
        depth reaches the tree's deepest leaf (the C and numpy walks take
        different numbers of extra steps, which a self-looping leaf makes
        harmless), children come after their parent, every value and the
        base score are finite, and no walk can sum to more than
        :data:`SCORE_LIMIT_LOG2` in magnitude (``2.0 ** score`` of a log2-time
        scorer stays a finite time).

        Raises
        ------
        ForestError
            Naming the first inconsistency.
        """
        n, t = len(self.nodes), len(self.roots)
        if self.nodes.dtype != NODE_DTYPE or len(self.depths) != t or self.nodes.ndim != 1:
            raise ForestError("flat forest arrays have inconsistent types or lengths")
        if not np.isfinite(self.base_score):
            raise ForestError(f"flat forest base score {self.base_score!r}; must be finite")
        if t == 0:
            return
        if not 0 < self.n_features <= 256:
            raise ForestError(f"flat forest n_features={self.n_features}; must be in [1, 256]")
        ends = np.append(self.roots[1:], n).astype(np.int64)
        size = ends - self.roots
        if (self.roots < 0).any() or (size < 1).any() or self.roots[0] != 0 or ends[-1] != n \
                or (size > 65536).any() or (self.depths < 0).any() or (self.depths > 64).any():
            raise ForestError("flat forest has a root, tree size or depth out of range")
        if (self.nodes["flags"] > 1).any():
            raise ForestError("flat forest has unknown flags")
        if not np.isfinite(self.nodes["value"]).all():
            raise ForestError("flat forest has a threshold or leaf value that is not finite")
        # int32 throughout (fewer bytes to move: a deep model has ~1M nodes, checked at every load)
        base = np.repeat(self.roots, size.astype(np.int32))                     # each node's tree root
        own = np.arange(n, dtype=np.int32) - base                               # index within its tree
        internal = (self.nodes["flags"] & FLAG_INTERNAL).astype(bool)
        child = self.nodes["child"].astype(np.int32)
        if (child + internal >= np.repeat(size.astype(np.int32), size)).any() \
                or (self.nodes["feature"] >= self.n_features).any():
            raise ForestError("flat forest has a child or feature index out of range")
        if np.where(internal, child <= own, child != own).any():
            raise ForestError("flat forest has a leaf that does not point to itself or a child before its parent")
        # Depth of every node reached from a root, a level at a time; a tree
        # deeper than the walks' 64-level limit is refused.
        depth = np.full(n, -1, np.int8)
        first_child = base + child                                               # absolute index
        frontier = self.roots
        level = 0
        while len(frontier):
            if level > 64:
                raise ForestError("flat forest has a tree deeper than 64 levels")
            depth[frontier] = level
            first = first_child[frontier[internal[frontier]]]
            frontier = np.concatenate([first, first + 1])
            level += 1
        deepest = np.maximum.reduceat(depth, self.roots)                        # trees are contiguous runs
        if (self.depths < deepest).any():
            raise ForestError("flat forest declares a tree shallower than its deepest leaf")
        leaf = np.abs(self.nodes["value"])                                      # float32: a maximum is exact
        leaf[internal] = 0.0
        bound = abs(self.base_score) + float(np.maximum.reduceat(leaf, self.roots).sum(dtype=np.float64))
        if not bound <= SCORE_LIMIT_LOG2:
            raise ForestError(f"flat forest scores can reach {bound:.3g} (base score plus each tree's largest "
                              f"leaf); at most {SCORE_LIMIT_LOG2:g} is a model's")

    @property
    def n_trees(self) -> int:
        """Number of trees."""
        return len(self.roots)

    def digest(self) -> str:
        """sha256 of the arrays, base score and feature count."""
        h = hashlib.sha256()
        for a in (self.nodes, self.roots, self.depths):
            h.update(a.tobytes())
        h.update(repr((self.base_score, self.n_features)).encode())
        return h.hexdigest()

    # -- evaluation (the numpy twin of costlearn_forest_predict) ---------

    def _check(self, X, first_tree, last_tree):
        if not isinstance(X, np.ndarray) or X.dtype != np.float32 or X.ndim != 2 \
                or X.shape[1] != self.n_features or not X.flags.c_contiguous:
            raise ValueError(f"X must be C-contiguous float32 of shape (R, {self.n_features}); got "
                             f"{getattr(X, 'dtype', type(X).__name__)} {getattr(X, 'shape', '')}")
        last_tree = self.n_trees if last_tree is None else last_tree
        if not 0 <= first_tree <= last_tree <= self.n_trees:
            raise ValueError(f"tree range [{first_tree}, {last_tree}) outside [0, {self.n_trees}]")
        return last_tree

    def leaves_numpy(self, X: np.ndarray, first_tree: int = 0, last_tree: int | None = None) -> np.ndarray:
        """Leaf value reached by each row in each tree of [first_tree, last_tree).

        Parameters
        ----------
        X : ndarray of float32, shape (R, n_features), C-contiguous
        first_tree, last_tree : int
            Tree range; all trees by default.

        Returns
        -------
        ndarray of float32, shape (R, last_tree - first_tree)

        Raises
        ------
        ValueError
            If X has the wrong dtype, layout or width, or the range is out of bounds.
        """
        last_tree = self._check(X, first_tree, last_tree)
        roots = self.roots[first_tree:last_tree].astype(np.int64)
        if len(roots) == 0:
            return np.zeros((X.shape[0], 0), np.float32)
        nodes = self.nodes
        idx = np.zeros((X.shape[0], len(roots)), np.int64)          # offsets from each root
        rows = np.arange(X.shape[0])[:, None]
        for _ in range(int(self.depths[first_tree:last_tree].max())):
            nd = nodes[roots + idx]
            second = ~(X[rows, nd["feature"]] < nd["value"])
            idx = nd["child"].astype(np.int64) + (second & ((nd["flags"] & FLAG_INTERNAL) != 0))
        return nodes["value"][roots + idx]

    def partial_sum_numpy(self, X: np.ndarray, first_tree: int = 0, last_tree: int | None = None) -> np.ndarray:
        """Sum of the leaves of trees [first_tree, last_tree) reached by each
        row, no base score, float64 summed tree by tree in order (the same
        bits as ``costlearn_forest_predict``); shape (R,). Arguments and
        errors as :meth:`leaves_numpy`."""
        leaves = self.leaves_numpy(X, first_tree, last_tree).astype(np.float64)
        if leaves.shape[1] == 0:
            return np.zeros(X.shape[0], np.float64)
        return np.cumsum(leaves, axis=1)[:, -1]        # sequential (cumsum accumulates in order)

    def range_sums_numpy(self, X: np.ndarray, bounds) -> np.ndarray:
        """:meth:`partial_sum_numpy` of each tree range ``[bounds[i],
        bounds[i + 1])`` (the members of an ensemble stored as one forest),
        float64, shape (len(bounds) - 1, R)."""
        return np.stack([self.partial_sum_numpy(X, int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])])

    def margin_numpy(self, X: np.ndarray) -> np.ndarray:
        """Base score + sum of all leaves per row, float64, shape (R,)."""
        return self.base_score + self.partial_sum_numpy(X)

    # -- persistence -----------------------------------------------------

    def arrays(self) -> dict:
        """The arrays and scalars, for ``numpy.savez`` (keys ``forest_*``)."""
        return dict(forest_nodes=self.nodes, forest_roots=self.roots, forest_depths=self.depths,
                    forest_base_score=np.float64(self.base_score), forest_n_features=np.int64(self.n_features))

    @classmethod
    def from_arrays(cls, z, checked: bool = False) -> "FlatForest":
        """Inverse of :meth:`arrays` (any mapping, e.g. an open ``.npz``);
        ``checked`` as the constructor's.

        Raises
        ------
        ForestError
            If a key is missing or the arrays are inconsistent.
        """
        try:
            nodes = np.asarray(z["forest_nodes"])
            if nodes.dtype != NODE_DTYPE:
                raise ForestError(f"flat forest nodes have dtype {nodes.dtype}, expected {NODE_DTYPE}")
            return cls(nodes, z["forest_roots"], z["forest_depths"], float(z["forest_base_score"]),
                       int(z["forest_n_features"]), checked)
        except (KeyError, TypeError) as e:
            raise ForestError(f"flat forest arrays incomplete ({type(e).__name__}: {e})") from None
