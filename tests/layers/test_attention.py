"""MultiHeadAttention: Keras's layout and equations, masks, gradients, tp.function."""

import numpy as np
import pytest

import tapefit as tp

RNG = np.random.default_rng(0)
Q = RNG.standard_normal((2, 4, 6)).astype(np.float32)
V = RNG.standard_normal((2, 5, 3)).astype(np.float32)

NAMES = ("query", "key", "value", "output")


def weights(layer):
    out = []
    for name in NAMES:
        out += [
            getattr(layer, f"{name}_kernel").numpy().astype(np.float64),
            getattr(layer, f"{name}_bias").numpy().astype(np.float64),
        ]
    return out


def reference(query, value, w, key_dim, mask=None):
    qk, qb, kk, kb, vk, vb, ok, ob = w
    q = np.einsum("btd,dhk->bthk", query, qk) + qb
    k = np.einsum("bsd,dhk->bshk", value, kk) + kb
    v = np.einsum("bsd,dhk->bshk", value, vk) + vb
    scores = np.einsum("bthk,bshk->bhts", q / np.sqrt(key_dim), k)
    if mask is not None:
        scores = np.where(mask[:, None], scores, -1e9)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    probs = scores / scores.sum(-1, keepdims=True)
    return np.einsum("bthk,hko->bto", np.einsum("bhts,bshk->bthk", probs, v), ok) + ob, probs


def make(global_seed=0, **kwargs):
    tp.random.set_seed(global_seed)
    layer = tp.layers.MultiHeadAttention(num_heads=3, key_dim=4, bias_initializer="random_normal", **kwargs)
    layer(tp.constant(Q), tp.constant(V))
    return layer


def test_layout_and_outputs_follow_keras():
    layer = make()
    shapes = [getattr(layer, f"{n}_kernel").shape for n in NAMES]
    assert shapes == [(6, 3, 4), (3, 3, 4), (3, 3, 4), (3, 4, 6)]
    assert layer.output_bias.shape == (6,)
    out, scores = layer(tp.constant(Q), tp.constant(V), return_attention_scores=True)
    expected, probs = reference(Q, V, weights(layer), 4)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scores.numpy(), probs, rtol=1e-5, atol=1e-6)
    assert tp.layers.MultiHeadAttention(2, 4, value_dim=5, output_shape=7)(
        tp.constant(Q), tp.constant(V)
    ).shape == (2, 4, 7)


def test_masked_keys_get_no_weight_and_change_nothing():
    layer = make()
    mask = np.ones((2, 4, 5), bool)
    mask[:, :, 3:] = False
    out, scores = layer(tp.constant(Q), tp.constant(V), attention_mask=mask, return_attention_scores=True)
    assert np.all(scores.numpy()[..., 3:] == 0.0)
    changed = V.copy()
    changed[:, 3:] += 10.0
    np.testing.assert_allclose(
        layer(tp.constant(Q), tp.constant(changed), attention_mask=mask).numpy(),
        out.numpy(),
        rtol=1e-6,
        atol=1e-6,
    )
    np.testing.assert_allclose(out.numpy(), reference(Q, V, weights(layer), 4, mask)[0], rtol=1e-5, atol=1e-5)


def test_the_causal_mask_hides_the_future():
    tp.random.set_seed(1)
    layer = tp.layers.MultiHeadAttention(2, 4)
    x = RNG.standard_normal((1, 6, 4)).astype(np.float32)
    out = layer(tp.constant(x), tp.constant(x), use_causal_mask=True).numpy()
    later = x.copy()
    later[0, 4:] += 3.0
    again = layer(tp.constant(later), tp.constant(later), use_causal_mask=True).numpy()
    np.testing.assert_allclose(again[0, :4], out[0, :4], rtol=1e-6, atol=1e-6)
    assert not np.allclose(again[0, 4:], out[0, 4:])


def test_step_masks_from_an_embedding_combine_like_keras():
    tp.random.set_seed(3)
    embedding = tp.layers.Embedding(9, 6, mask_zero=True)
    layer = tp.layers.MultiHeadAttention(2, 4)
    ids = np.array([[3, 1, 4, 0, 0], [2, 7, 1, 8, 0]])
    steps = embedding.compute_mask(ids)  # (batch, steps): the ids that are not padding
    x = embedding(ids)
    out, scores = layer(x, x, query_mask=steps, value_mask=steps, return_attention_scores=True)
    pairs = steps.numpy()[:, :, None] & steps.numpy()[:, None, :]
    expected, probs = layer(x, x, attention_mask=pairs, return_attention_scores=True)
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    np.testing.assert_array_equal(scores.numpy(), probs.numpy())
    real = scores.numpy()[0, :, :3]
    assert np.all(real[..., 3:] == 0.0) and np.allclose(real[..., :3].sum(-1), 1.0)
    # What sits at a padded step changes nothing at the real ones; a key mask alone masks keys.
    changed = x.numpy().copy()
    changed[0, 3:] += 5.0
    again = layer(tp.constant(changed), tp.constant(changed), query_mask=steps, value_mask=steps)
    np.testing.assert_allclose(again.numpy()[0, :3], out.numpy()[0, :3], rtol=1e-6, atol=1e-6)
    keyed = layer(x, x, key_mask=steps, return_attention_scores=True)[1].numpy()
    assert np.all(keyed[0, ..., 3:] == 0.0) and np.all(keyed[0, :, 3:, :3] > 0.0)
    causal = layer(x, x, value_mask=steps, use_causal_mask=True, return_attention_scores=True)[1]
    assert np.all(np.triu(causal.numpy()[1, 0], 1) == 0.0) and np.all(causal.numpy()[1, :, :, 4] == 0.0)
    with pytest.raises(
        ValueError, match=r"query_mask must have shape \(batch, steps\) = \(2, 5\), got \(2, 4\)"
    ):
        layer(x, x, query_mask=np.ones((2, 4), bool))


def test_gradients_match_finite_differences():
    layer = make()

    def run(query, value, *w):
        for name, kernel, bias in zip(NAMES, w[0::2], w[1::2]):
            setattr(layer, f"{name}_kernel", kernel)
            setattr(layer, f"{name}_bias", bias)
        return layer.call(query, value, use_causal_mask=True)

    tp.testing.check_gradients(
        run, Q[:1, :3].astype(np.float64), V[:1, :3].astype(np.float64), *weights(layer)
    )


def test_dropout_drops_attention_weights_after_the_softmax_as_keras():
    layer = make(dropout=0.5, seed=7)
    query, value = tp.constant(Q), tp.constant(V)
    plain, probs = layer(query, value, return_attention_scores=True)
    np.testing.assert_array_equal(layer(query, value, training=False).numpy(), plain.numpy())
    tp.random.set_seed(4)
    out, scores = layer(query, value, training=True, return_attention_scores=True)
    np.testing.assert_array_equal(scores.numpy(), probs.numpy())  # the scores before dropout
    tp.random.set_seed(4)  # the same draw: the kept weights, scaled by 1 / (1 - rate)
    keep = tp.nn.dropout(tp.ones(probs.shape), 0.5, seed=7).numpy()
    assert 0.4 < np.mean(keep > 0) < 0.6 and set(np.unique(keep)) == {0.0, 2.0}
    *_, vk, vb, ok, ob = weights(layer)
    v = np.einsum("bsd,dhk->bshk", V, vk) + vb
    context = np.einsum("bhts,bshk->bthk", probs.numpy() * keep, v)
    np.testing.assert_allclose(
        out.numpy(), np.einsum("bthk,hko->bto", context, ok) + ob, rtol=1e-5, atol=1e-5
    )
    assert not np.allclose(out.numpy(), plain.numpy())


def test_dropout_repeats_with_the_seeds_and_differs_from_call_to_call():
    def run():
        tp.random.set_seed(11)
        layer = make(dropout=0.3, seed=5)
        return [layer(tp.constant(Q), tp.constant(V), training=True).numpy() for _ in range(2)]

    first, again = run(), run()
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.allclose(first[0], first[1])  # a fresh mask per call


def test_gradients_with_dropout_match_finite_differences():
    layer = make(dropout=0.4, seed=1)

    def run(query, value, *w):
        for name, kernel, bias in zip(NAMES, w[0::2], w[1::2]):
            setattr(layer, f"{name}_kernel", kernel)
            setattr(layer, f"{name}_bias", bias)
        tp.random.set_seed(2)  # the same mask at every evaluation
        return layer.call(query, value, training=True)

    tp.testing.check_gradients(
        run, Q[:1, :3].astype(np.float64), V[:1, :3].astype(np.float64), *weights(layer)
    )


def test_a_compiled_step_equals_the_eager_one_bit_for_bit():
    def stepper():
        layer = make(global_seed=2)
        optimizer = tp.optimizers.Adam(0.01)

        def step(query, value, mask):
            with tp.GradientTape() as tape:
                loss = tp.reduce_mean(tp.square(layer(query, value, attention_mask=mask)))
            optimizer.apply_gradients(
                zip(tape.gradient(loss, layer.trainable_variables), layer.trainable_variables)
            )
            return loss

        return step

    eager, compiled = stepper(), tp.function(stepper())
    for cut in (5, 2, 4):  # the mask is a Tensor argument: a replay must use each call's own
        mask = np.zeros((2, 4, 5), bool)
        mask[:, :, :cut] = True
        args = (tp.constant(Q), tp.constant(V), tp.constant(mask))
        assert float(eager(*args)) == float(compiled(*args))


def test_bad_shapes_are_named():
    layer = make()
    with pytest.raises(ValueError, match=r"query must have shape \(batch, steps, features\), got \(4, 6\)"):
        layer(tp.constant(Q[0]), tp.constant(V))
    with pytest.raises(
        ValueError, match=r"attention_mask must have shape \(batch, T, S\) = \(2, 4, 5\), got \(2, 4, 4\)"
    ):
        layer(tp.constant(Q), tp.constant(V), attention_mask=np.ones((2, 4, 4), bool))
    with pytest.raises(
        ValueError, match=r"built for \(query, key, value\) feature sizes \(6, 3, 3\), got \(6, 2, 2\)"
    ):
        layer(tp.constant(Q), tp.constant(V[..., :2]))
    with pytest.raises(ValueError, match="num_heads must be a positive integer"):
        tp.layers.MultiHeadAttention(0, 4)


# -- against PyTorch ------------------------------------------------------------------------
# scripts/torch_reference_attention.py maps Keras's layout onto scaled_dot_product_attention;
# its saved numbers are checked in CI (no PyTorch there), and live where PyTorch is installed.

MASKS = ["none", "causal", "padding"]


def tapefit_attention(layer, query, key, value, upstream, **masks):
    """The layer's output and its gradients under the script's names."""
    inputs = [tp.constant(a) for a in (query, key, value)]
    with tp.GradientTape() as tape:
        tape.watch(inputs)
        output = layer(inputs[0], inputs[2], key=inputs[1], **masks)
    names = ["query", "key", "value"] + [f"{n}_{part}" for n in NAMES for part in ("kernel", "bias")]
    sources = inputs + [getattr(layer, name) for name in names[3:]]
    grads = tape.gradient(output, sources, output_gradients=tp.constant(upstream))
    return {"output": output.numpy(), **{f"d_{n}": g.numpy() for n, g in zip(names, grads)}}


def assert_all_close(got, want):
    """rtol 1e-5, atol 1e-6 or 1e-6 of the largest value (float32 sums cancel to small values)."""
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        atol = 1e-6 * max(1.0, np.abs(value).max())
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=atol, err_msg=name)


def keras_masks(mask, attention_mask):
    return {"none": {}, "causal": {"use_causal_mask": True}, "padding": {"attention_mask": attention_mask}}[
        mask
    ]


@pytest.mark.parametrize("mask", MASKS)
def test_outputs_and_gradients_equal_pytorchs_saved(saved_case, mask):
    shared, case = saved_case("mha"), saved_case(f"mha_{mask}")
    layer = tp.layers.MultiHeadAttention(
        int(shared["num_heads"]), int(shared["key_dim"]), value_dim=int(shared["value_dim"])
    )
    layer(tp.constant(shared["query"]), tp.constant(shared["value"]), key=tp.constant(shared["key"]))
    for name in NAMES:
        for part in ("kernel", "bias"):
            getattr(layer, f"{name}_{part}").assign(shared[f"{name}_{part}"])
    got = tapefit_attention(
        layer,
        shared["query"],
        shared["key"],
        shared["value"],
        case["upstream"],
        **keras_masks(mask, case.get("attention_mask")),
    )
    assert_all_close(got, {k: v for k, v in case.items() if k == "output" or k.startswith("d_")})


@pytest.mark.parametrize("mask", MASKS)
def test_outputs_and_gradients_equal_pytorchs_live(torch_reference, mask):
    pytest.importorskip("torch")
    layer = make()
    key = RNG.standard_normal(V.shape).astype(np.float32)
    upstream = RNG.standard_normal(Q.shape).astype(np.float32)
    padding = np.broadcast_to(np.arange(5) < np.array([5, 2])[:, None, None], (2, 4, 5)).copy()
    full = {
        "none": None,
        "causal": np.broadcast_to(np.tril(np.ones((4, 5), bool)), (2, 4, 5)),
        "padding": padding,
    }
    w = {f"{n}_{part}": getattr(layer, f"{n}_{part}").numpy() for n in NAMES for part in ("kernel", "bias")}
    mask_array = None if full[mask] is None else np.ascontiguousarray(full[mask])
    expected = torch_reference.attention(Q, key, V, w, mask_array, upstream)
    assert_all_close(tapefit_attention(layer, Q, key, V, upstream, **keras_masks(mask, padding)), expected)
