"""A trained XGBoost ensemble as flat arrays, evaluated by a few lines of C
(``costlearn_forest_predict`` in ``costlearn/_native.c``) over the small batch
of candidates the predictor ranks.

Why not XGBoost itself: ``Booster.inplace_predict`` on 64 candidates costs
about 0.5 ms, dominated by per-call set-up; treelite's GTIL costs 2.6 ms and a
tl2cgen-compiled library 0.34 ms for the same batch (measured with the
committed PoCL model, 156 trees of depth <= 8). The predictor's budget is
0.1 ms for features and model together. The flat layout (children adjacent,
leaves self-looping) walks every tree in exactly its depth in branch-free
steps with the candidates interleaved, which is what makes the difference.

The C file is compiled once per machine (:mod:`costlearn.native`); where
there is no C compiler the predictor uses ``inplace_predict`` (the same model,
slower).

Decision rule, as XGBoost's: the first (``yes``) child when
``x < threshold``, else the second; NaN goes to the default child. Leaf
values are summed in float64 on top of the base score; XGBoost sums in
float32, so margins agree to about 1e-6 (the predictor checks 1e-4 against
``inplace_predict`` when it loads a model).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile

import numpy as np

from ..native import cache_dir, library

__all__ = ["FlatForest", "ForestError"]

FORMAT = 1
"""Version of the flat layout (part of the cache key)."""

NODE_DTYPE = np.dtype([("feature", "<i4"), ("threshold", "<f4"), ("child", "<i4"),
                       ("missing", "<i2"), ("internal", "<i2")])
"""Layout of ``costlearn_node`` in ``_native.c`` (16 bytes)."""


class ForestError(ValueError):
    """The booster cannot be flattened (not a single-output ``gbtree``), or
    the flat forest disagrees with XGBoost."""


class FlatForest:
    """An XGBoost ``gbtree`` ensemble as flat arrays.

    Attributes
    ----------
    nodes : ndarray of :data:`NODE_DTYPE`, shape (total nodes,)
    leaf_value : ndarray of float32, shape (total nodes,)
        Value at leaves, 0 elsewhere.
    roots, depths : ndarray of int32, shape (trees,)
    base_score : float
        Added to the sum of leaves (the margin's intercept).
    n_features : int
    """

    def __init__(self, nodes, leaf_value, roots, depths, base_score: float, n_features: int):
        self.nodes = np.ascontiguousarray(nodes, NODE_DTYPE)
        self.leaf_value = np.ascontiguousarray(leaf_value, np.float32)
        self.roots = np.ascontiguousarray(roots, np.int32)
        self.depths = np.ascontiguousarray(depths, np.int32)
        self.base_score = float(base_score)
        self.n_features = int(n_features)
        self._ptrs = tuple(a.ctypes.data for a in (self.nodes, self.leaf_value, self.roots, self.depths))

    @classmethod
    def from_booster(cls, booster) -> "FlatForest":
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
        base = param["base_score"]
        base = float(json.loads(base)[0] if base.startswith("[") else base)
        trees = gb["model"]["trees"]
        if int(gb["model"]["gbtree_model_param"].get("num_parallel_tree", 1)) != 1:
            raise ForestError("boosted random forests (num_parallel_tree > 1) cannot be flattened")
        n_features = int(param["num_feature"])
        nodes, values, roots, depths = [], [], [], []
        offset = 0
        for tree in trees:
            lc = np.asarray(tree["left_children"], np.int64)
            rc = np.asarray(tree["right_children"], np.int64)
            cond = np.asarray(tree["split_conditions"], np.float32)
            # Breadth-first relabelling, a level at a time: the two children of
            # a node get adjacent slots.
            levels, frontier = [np.zeros(1, np.int64)], np.zeros(1, np.int64)
            while True:
                inner = frontier[lc[frontier] != -1]
                if not len(inner):
                    break
                frontier = np.stack([lc[inner], rc[inner]], axis=1).ravel()
                levels.append(frontier)
            order = np.concatenate(levels)
            new = np.empty(len(lc), np.int64)
            new[order] = offset + np.arange(len(order))
            leaf = lc[order] == -1
            arr = np.zeros(len(order), NODE_DTYPE)
            arr["feature"] = np.where(leaf, 0, np.asarray(tree["split_indices"], np.int64)[order])
            arr["threshold"] = np.where(leaf, np.float32(np.inf), cond[order])
            arr["child"] = np.where(leaf, new[order], new[np.where(leaf, 0, lc[order])])
            arr["missing"] = np.where(leaf, 0, 1 - np.asarray(tree["default_left"], np.int64)[order])
            arr["internal"] = ~leaf
            nodes.append(arr)
            values.append(np.where(leaf, cond[order], np.float32(0)))
            roots.append(offset)
            depths.append(len(levels) - 1)
            offset += len(order)
        return cls(np.concatenate(nodes), np.concatenate(values), roots, depths, base, n_features)

    @classmethod
    def cached(cls, booster, model_sha256: str, rebuild: bool = False) -> "FlatForest":
        """:meth:`from_booster`, through a cache of the flat arrays in
        :func:`cache_dir` keyed by the model file's sha256 (flattening parses
        the booster's JSON: about 0.15 s for the committed model; the cache
        loads in about 1 ms). The file stores a sha256 of its arrays; one
        that cannot be read, whose digest or feature count differs, or that
        fails :meth:`validate` is rebuilt, as is any with ``rebuild``."""
        path = cache_dir() / f"forest-v{FORMAT}-{model_sha256[:32]}.npz"
        if not rebuild:
            try:
                with np.load(path) as z:
                    forest = cls(z["nodes"], z["leaf_value"], z["roots"], z["depths"],
                                 float(z["base_score"]), int(z["n_features"]))
                    stored = str(z["digest"])
                if stored == forest.digest() and forest.n_features == booster.num_features():
                    forest.validate()
                    return forest
            except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile):
                pass                   # unreadable or damaged: rebuilt below
        forest = cls.from_booster(booster)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(suffix=".npz", dir=path.parent)
            with os.fdopen(fd, "wb") as f:
                np.savez(f, nodes=forest.nodes, leaf_value=forest.leaf_value, roots=forest.roots,
                         depths=forest.depths, base_score=forest.base_score, n_features=forest.n_features,
                         digest=forest.digest())
            os.replace(tmp, path)
        except OSError:
            pass                       # a read-only cache only costs time
        finally:
            if tmp is not None and os.path.exists(tmp):
                os.unlink(tmp)
        return forest

    def digest(self) -> str:
        """sha256 of the arrays, base score and feature count."""
        h = hashlib.sha256()
        for a in (self.nodes, self.leaf_value, self.roots, self.depths):
            h.update(a.tobytes())
        h.update(repr((self.base_score, self.n_features)).encode())
        return h.hexdigest()

    def validate(self) -> None:
        """Check that every index the C walk follows stays inside the arrays
        (a damaged cache file must not make it read out of bounds).

        Raises
        ------
        ValueError
            Naming the first inconsistency.
        """
        n = len(self.nodes)
        if self.nodes.dtype != NODE_DTYPE or len(self.leaf_value) != n or len(self.roots) != len(self.depths):
            raise ValueError("flat forest arrays have inconsistent types or lengths")
        child, feat = self.nodes["child"].astype(np.int64), self.nodes["feature"].astype(np.int64)
        inner = self.nodes["internal"] == 1
        if n == 0 or (child < 0).any() or (child + inner.astype(np.int64) >= n).any() \
                or (feat < 0).any() or (feat >= self.n_features).any():
            raise ValueError("flat forest has a child or feature index out of range")
        if ((self.roots < 0) | (self.roots >= n)).any() or (self.depths < 0).any() or (self.depths > 64).any():
            raise ValueError("flat forest has a root or depth out of range")
        if not np.isin(self.nodes["internal"], (0, 1)).all() or not np.isin(self.nodes["missing"], (0, 1)).all():
            raise ValueError("flat forest has flags other than 0/1")

    @property
    def n_trees(self) -> int:
        return len(self.roots)

    def partial_sum(self, X: np.ndarray, first_tree: int = 0, last_tree: int | None = None) -> np.ndarray:
        """Sum of the leaves of trees [first_tree, last_tree) reached by each
        row (no base score).

        Parameters
        ----------
        X : ndarray of float32, shape (R, n_features), C-contiguous
        first_tree, last_tree : int
            Tree range; all trees by default.

        Returns
        -------
        ndarray of float64, shape (R,)

        Raises
        ------
        ForestError
            If the C evaluator is unavailable.
        ValueError
            If X has the wrong dtype, layout or width, or the tree range is
            out of bounds.
        """
        lib = library()
        if lib is None:
            raise ForestError("the C tree evaluator is unavailable (see the warning); use xgboost")
        if X.dtype != np.float32 or X.ndim != 2 or X.shape[1] != self.n_features or not X.flags.c_contiguous:
            raise ValueError(f"X must be C-contiguous float32 of shape (R, {self.n_features}); "
                             f"got {X.dtype} {X.shape}")
        rows = X.shape[0]
        last_tree = self.n_trees if last_tree is None else last_tree
        if not 0 <= first_tree <= last_tree <= self.n_trees:
            raise ValueError(f"tree range [{first_tree}, {last_tree}) outside [0, {self.n_trees}]")
        out = np.empty(rows, np.float64)
        nodes, leaves, roots, depths = self._ptrs
        lib.costlearn_forest_predict(nodes, leaves, roots + 4 * first_tree, depths + 4 * first_tree,
                                     last_tree - first_tree, X.ctypes.data, rows, self.n_features,
                                     out.ctypes.data)
        return out

    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """Margin (base score + sum of all leaves) of each row, float64,
        shape (R,); the arguments and errors of :meth:`partial_sum`."""
        return self.partial_sum(X) + self.base_score
