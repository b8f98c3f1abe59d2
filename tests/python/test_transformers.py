"""flashjit as a transformers attention implementation: small randomly
initialized models built from a config (no download) whose logits match
attn_implementation="sdpa" on the same weights: Llama with GQA, with left
and right padding, greedy generation through the KV cache (decode steps),
and Mistral's sliding window."""
import pytest
import torch

transformers = pytest.importorskip("transformers")
import flashjit.transformers  # noqa: E402

NAME = flashjit.transformers.register()


def pair(config_cls, dtype=torch.float32, device="cpu", **kw):
    """The same random weights under "sdpa" and under flashjit."""
    base = dict(vocab_size=101, hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    base.update(kw)
    model_cls = {"LlamaConfig": transformers.LlamaForCausalLM,
                 "MistralConfig": transformers.MistralForCausalLM}[config_cls.__name__]
    ref = model_cls._from_config(config_cls(**base), attn_implementation="sdpa")
    fj = model_cls._from_config(config_cls(**base), attn_implementation=NAME)
    ref, fj = (m.to(device=device, dtype=dtype).eval() for m in (ref, fj))
    fj.load_state_dict(ref.state_dict())
    assert ref.config._attn_implementation == "sdpa" and fj.config._attn_implementation == NAME
    return ref, fj


def logits(model, ids, mask=None):
    with torch.no_grad():
        return model(ids, attention_mask=mask).logits.float()


def rel(a, b):
    return (torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b)).item()


def test_llama_logits_match_sdpa():
    torch.manual_seed(1)  # the model's weights; the comparison does not depend on them
    ref, fj = pair(transformers.LlamaConfig)
    ids = torch.randint(0, 101, (3, 37))
    assert rel(logits(fj, ids), logits(ref, ids)) < 1e-5


@pytest.mark.parametrize("side", ["left", "right"])
def test_llama_padded_batch(side):
    torch.manual_seed(2)
    ref, fj = pair(transformers.LlamaConfig)
    ids = torch.randint(0, 101, (3, 21))
    mask = torch.ones(3, 21, dtype=torch.long)
    if side == "left":
        mask[0, :6], mask[2, :1] = 0, 0
    else:
        mask[0, 15:], mask[1, 20:] = 0, 0
    valid = mask.bool()
    a, b = logits(fj, ids, mask)[valid], logits(ref, ids, mask)[valid]
    assert rel(a, b) < 1e-5


def test_llama_greedy_generation_matches_sdpa():
    torch.manual_seed(3)
    ref, fj = pair(transformers.LlamaConfig)
    ids = torch.randint(0, 101, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[1, :3] = 0
    kw = dict(attention_mask=mask, max_new_tokens=12, do_sample=False, pad_token_id=0)
    with torch.no_grad():
        assert torch.equal(fj.generate(ids, **kw), ref.generate(ids, **kw))


def test_mistral_sliding_window_matches_sdpa():
    torch.manual_seed(4)
    ref, fj = pair(transformers.MistralConfig, sliding_window=5)
    ids = torch.randint(0, 101, (2, 29))
    assert rel(logits(fj, ids), logits(ref, ids)) < 1e-5


def test_what_flashjit_cannot_express_raises():
    torch.manual_seed(5)
    _, fj = pair(transformers.LlamaConfig)
    ids = torch.randint(0, 101, (1, 8))
    holes = torch.tensor([[1, 1, 0, 1, 1, 1, 1, 1]])
    with pytest.raises(ValueError, match=r"padding mask row 0 has holes"):
        logits(fj, ids, holes)
    four_d = torch.ones(1, 1, 8, 8, dtype=torch.bool).tril()
    with pytest.raises(ValueError, match=r"got a 4-D torch.bool attention mask"):
        logits(fj, ids, four_d)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_llama_cuda_logits_match_sdpa(dtype):
    torch.manual_seed(6)
    ref, fj = pair(transformers.LlamaConfig, dtype, "cuda", hidden_size=512, intermediate_size=1024,
                   num_attention_heads=8, num_key_value_heads=2)  # head_dim 64
    ids = torch.randint(0, 101, (2, 300), device="cuda")
    mask = torch.ones(2, 300, dtype=torch.long, device="cuda")
    mask[1, :17] = 0
    valid = mask.bool()
    tol = 2e-2 if dtype == torch.bfloat16 else 4e-3
    assert rel(logits(fj, ids), logits(ref, ids)) < tol
    assert rel(logits(fj, ids, mask)[valid], logits(ref, ids, mask)[valid]) < tol
