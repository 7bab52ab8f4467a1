"""Pre-training data: corpus readers, NSP/SOP instances, MLM masking, shards and batching.

corpus.py (documents) -> instances.py (pairs) -> masking.py (MLM) -> shards.py (disk) ->
collate.py (tensors for `BertForPreTraining`); prepare.py runs the pipeline, streamed and sharded.
"""
