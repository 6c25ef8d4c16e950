"""SIE on Ray Data: callable classes for `Dataset.map_batches` that encode, score or extract
over a text column, with an Engine in each actor (CPU, or one GPU per actor with
`num_gpus=1`) or against an SIE server or cluster over HTTP (`url=`).

    import ray
    from sie_ray import SIEEncoder

    ds = ray.data.read_parquet("docs.parquet")
    ds = ds.map_batches(SIEEncoder, fn_constructor_kwargs={"model": "sentence-transformers/all-MiniLM-L6-v2"},
                        concurrency=2, batch_size=256, batch_format="pyarrow")
    ds.write_lance("docs.lance")

Progress is Ray Data's own; a dead actor is restarted and its batch retried by Ray.
"""

from .encoder import SIEEncoder
from .extractor import SIEExtractor
from .scorer import SIEScorer
from .stage import SIEStage

__all__ = ["SIEEncoder", "SIEExtractor", "SIEScorer", "SIEStage"]
