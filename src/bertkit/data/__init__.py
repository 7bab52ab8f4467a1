"""Pre-training data: corpus readers, NSP/SOP instances, MLM masking, shards and batching.

corpus.py, columnar.py and documents.py (documents from text, JSONL, Parquet/Arrow, ...) ->
sentences.py (the sentence splitter) -> chunks.py + instances.py (NSP/SOP pairs) -> masking.py
(MLM) -> shards.py + meta.py (disk) -> collate.py (tensors for `BertForPreTraining`);
prepare.py runs the pipeline, streamed and sharded, and parts.py splits it across machines
(`--part I/N`, `merge-shards`); download.py fetches the public data sets.
"""
