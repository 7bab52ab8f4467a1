"""The packed (varlen) layout: cu_seqlens, the padded rows, and the attention groups."""

import torch

from bertkit.varlen import VarlenLayout, attention_groups


def test_attention_groups_minimise_the_attention_work():
    assert attention_groups([100, 10, 10, 10], 1024) == [(0, 1), (1, 4)]
    assert attention_groups([12, 11, 10, 9], 1024) == [(0, 4)]  # a cut costs more than it saves
    assert attention_groups([5, 5, 3], 0) == [(0, 2), (2, 3)]
    assert attention_groups([7], 1024) == [(0, 1)]
    assert attention_groups([9, 4, 4, 1], float("inf")) == [(0, 4)]


def test_varlen_layout_is_the_cu_seqlens_form():
    """Packed longest first: cu_seqlens are the offsets, indices the rows in the padded batch,
    and pad(unpad(x)) gives x back at real tokens, zeros at padding."""
    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [0, 1, 1, 0]])
    layout = VarlenLayout.from_mask(mask, group_cost=0.0)
    assert layout.cu_seqlens.tolist() == [0, 4, 6, 8] and layout.max_seqlen == 4
    assert layout.cu_seqlens.dtype == torch.int32
    assert layout.indices.tolist() == [4, 5, 6, 7, 0, 1, 9, 10]
    assert [(g.first, g.last, g.start, g.end, g.max_len) for g in layout.groups] == \
        [(0, 1, 0, 4, 4), (1, 3, 4, 8, 2)]
    assert layout.groups[0].index is None and layout.groups[1].index is None  # full in-group
    x = torch.arange(12.0).view(3, 4)
    assert layout.unpad(x).tolist() == [4, 5, 6, 7, 0, 1, 9, 10]
    assert torch.equal(layout.pad(layout.unpad(x)), x * mask)
    one = VarlenLayout.from_mask(mask, group_cost=float("inf")).groups
    assert len(one) == 1 and one[0].index.tolist() == [0, 1, 2, 3, 4, 5, 8, 9]
    assert one[0].key_mask.shape == (3, 1, 1, 4)
    packed = VarlenLayout.from_lengths([3, 1])  # already packed: left-aligned in (2, 3)
    assert packed.padded_shape == (2, 3) and packed.indices.tolist() == [0, 1, 2, 3]
