"""Contrastive and metric-learning losses over a batch similarity matrix: SupCon (Khosla et al. 2020), SINCERE
and the margin losses compared by Feeney & Hughes (2024), InfoNCE (Oord et al. 2018), SimO (Bouhsine et al.
2024), the proxy and margin-softmax losses (ProxyAnchor, ProxyNCA, NormalizedSoftmax, ArcFace with
SubCenter ArcFace, CosFace), the pair-weighting losses (MultiSimilarity, Circle) and the sigmoid loss
(SigLIP). Each loss's exact form, and where the papers' public code differs: docs/conventions.md; each beside
its pytorch-metric-learning class: docs/losses.md.

Every pair loss takes ``sim`` [n, M] (higher = more similar) between n anchors and M keys, integer ``labels``
[n] and, for the rectangular / distributed form, ``key_labels`` [M], ``self_index`` [n] (column of each
anchor's own key, masked as a self-pair) and ``axis_name`` (numerators *and* counts are summed over that named
axis, so every device returns the loss of the whole global batch). The square call ``loss(sim, labels)`` is
the plain form: keys = anchors, self-pairs excluded. If ``key_labels`` is given without ``self_index`` no
column is excluded. Anchors, pairs or triplets that do not exist (no positive, no negative) are left out of
the means; an empty set gives a loss of 0 with zero gradients. The pair losses also take a miner's
``pos_mask`` / ``neg_mask`` (:mod:`geojax.miners`), and the softmax losses multi-hot ``labels`` [n, L]. The
proxy losses take ``sim`` [n, C] to C class proxies (column c = class c), which the caller keeps as
parameters; with ``axis_name`` their per-proxy sums run over the global batch.

Conventions match pytorch-metric-learning's with a similarity (CosineSimilarity): margins are in similarity
units and pairs are ordered (i, j), i ≠ j. Log-sum-exps run in fp32 with the (stop-gradient) row maximum
subtracted, and masked entries hold large finite values, never ±inf. A NaN or ±Inf anywhere in ``sim`` (or
in the embeddings of the blocked forms, the ring form and SimO, through their similarities) makes the loss
NaN, whatever the masks select.

``supcon_blocked``, ``sincere_blocked`` and ``info_nce_blocked`` take embeddings and a similarity function
and never materialise the [n, M] matrix (nor store it for the backward pass): anchors are processed in
blocks, each with an online log-sum-exp over key blocks, under ``jax.checkpoint``. ``sigmoid_ring`` takes
each device's own anchors and keys and passes the key blocks round the devices, so no device holds the
global batch's keys.
"""

from geojax.losses._common import LOSSES as LOSSES
from geojax.losses._common import MININGS as MININGS
from geojax.losses._common import MULTILABELS as MULTILABELS
from geojax.losses._common import REDUCTIONS as REDUCTIONS
from geojax.losses._common import LossName as LossName
from geojax.losses._common import Mining as Mining
from geojax.losses._common import MultiLabel as MultiLabel
from geojax.losses._common import Reduction as Reduction
from geojax.losses._margin import contrastive as contrastive
from geojax.losses._margin import lifted_structured as lifted_structured
from geojax.losses._margin import triplet as triplet
from geojax.losses._pairs import circle as circle
from geojax.losses._pairs import multi_similarity as multi_similarity
from geojax.losses._proxy import arcface as arcface
from geojax.losses._proxy import cosface as cosface
from geojax.losses._proxy import normalized_softmax as normalized_softmax
from geojax.losses._proxy import proxy_anchor as proxy_anchor
from geojax.losses._proxy import proxy_nca as proxy_nca
from geojax.losses._sigmoid import sigmoid as sigmoid
from geojax.losses._sigmoid import sigmoid_ring as sigmoid_ring
from geojax.losses._simo import simo as simo
from geojax.losses._softmax import info_nce as info_nce
from geojax.losses._softmax import info_nce_blocked as info_nce_blocked
from geojax.losses._softmax import sincere as sincere
from geojax.losses._softmax import sincere_blocked as sincere_blocked
from geojax.losses._softmax import supcon as supcon
from geojax.losses._softmax import supcon_blocked as supcon_blocked
