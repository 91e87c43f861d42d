"""Shared by the benchmarks: data, machine description, the tokenizer, and the two models.

Both models have the sizes the issues name: d_model 256, 3+3 layers, 4 heads, FFN 1024, a shared
8000-piece vocabulary with tied embeddings. Ours is seq2seq's `Seq2SeqTransformer`; the peer is a
Hugging Face `MarianMTModel` (`pip install -e ".[bench]"`), never a runtime dependency.
"""

from __future__ import annotations

import gzip
import importlib.metadata
import os
import platform
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from seq2seq.config import ModelConfig  # noqa: E402
from seq2seq.model.transformer import Seq2SeqTransformer  # noqa: E402
from seq2seq.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, Tokenizer, train_tokenizer  # noqa: E402
from seq2seq.config import TokenizerConfig

DATA = ROOT.parent / "shared" / "data" / "multi30k"
SIZES = dict(d_model=256, heads=4, ffn_dim=1024, layers=3, vocab=8000)


def read_gz(path: Path, limit: int | None = None) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f]
    return lines[:limit] if limit else lines


ISA_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "CT2_FORCE_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def split_arguments(p) -> None:
    """The options of a benchmark that decodes a split of a parallel corpus (--data-dir, --src, --tgt,
    --split, --beam, --limit, --threads)."""
    p.add_argument("--data-dir", type=Path, default=DATA)
    p.add_argument("--src", default="en")
    p.add_argument("--tgt", default="de")
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    p.add_argument("--threads", type=int, default=2)


def read_split(args) -> tuple[list[str], list[str]]:
    """(sources, references) of the split `split_arguments` named, on args.threads threads (printed with the
    machine)."""
    torch.set_num_threads(args.threads)
    print(machine_info(args.threads))
    return (read_gz(args.data_dir / f"{args.split}.{args.src}.gz", args.limit),
            read_gz(args.data_dir / f"{args.split}.{args.tgt}.gz", args.limit))


def forced_isa() -> str:
    """The instruction-set limits set in the environment (README: 'CPUs'), or 'ISA not forced'."""
    forced = [f"{name}={os.environ[name]}" for name in ISA_VARIABLES if os.environ.get(name)]
    return " ".join(forced) if forced else "ISA not forced"


def machine_info(threads: int) -> str:
    """Where a benchmark ran: CPU model and AVX-512 flags, the kernels torch dispatches to, any forced
    ISA limits, GPU, library versions, threads and load."""
    cpu = "unknown CPU"
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu == "unknown CPU":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        cpu = platform.processor() or cpu
    isa = [f for f in ("avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8") if f in flags]
    try:  # the installed version, without importing it (a second or more)
        hf = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        hf = "not installed"
    load = "n/a"
    if hasattr(os, "getloadavg"):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none"
    return (
        f"CPU: {cpu} ({os.cpu_count()} logical cores; {' '.join(isa) or 'no AVX-512'})\n"
        f"kernels: torch CPU capability {torch.backends.cpu.get_cpu_capability()}; {forced_isa()}; GPU: {gpu}\n"
        f"torch {torch.__version__}, transformers {hf}, python {platform.python_version()}, "
        f"threads {threads}, load average {load}\n"
        f"oneDNN kernel caches (bf16 on CPU; see seq2seq.accel.cpu.limit_onednn_caches): "
        f"ONEDNN_PRIMITIVE_CACHE_CAPACITY={os.environ.get('ONEDNN_PRIMITIVE_CACHE_CAPACITY', 'default')}, "
        f"LRU_CACHE_CAPACITY={os.environ.get('LRU_CACHE_CAPACITY', 'default')}"
    )


def tokenizer(cache_dir: Path) -> Tokenizer:
    """The joint 8000-piece SentencePiece model of the Multi30K training set (trained once, cached)."""
    path = cache_dir / f"m30k-joint-{SIZES['vocab']}.model"
    if path.is_file():
        return Tokenizer.load(path)
    print(f"training a joint {SIZES['vocab']}-piece SentencePiece model on Multi30K train (cached in {path}) ...", flush=True)
    texts = read_gz(DATA / "train.en.gz") + read_gz(DATA / "train.de.gz")
    tok = train_tokenizer(texts, SIZES["vocab"], TokenizerConfig(vocab_size=SIZES["vocab"]))
    cache_dir.mkdir(parents=True, exist_ok=True)
    tok.save(path)
    return tok


def build_ours(vocab: int, dropout: float = 0.1) -> Seq2SeqTransformer:
    torch.manual_seed(0)
    cfg = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=SIZES["d_model"], heads=SIZES["heads"],
                      ffn_dim=SIZES["ffn_dim"], layers=SIZES["layers"], dropout=dropout, share_embeddings=True,
                      tie_output=True, pad_id=PAD_ID)
    return Seq2SeqTransformer(cfg).eval()


def build_hf(vocab: int, dropout: float = 0.1):
    from transformers import MarianConfig, MarianMTModel

    torch.manual_seed(0)
    cfg = MarianConfig(
        vocab_size=vocab, d_model=SIZES["d_model"], encoder_layers=SIZES["layers"], decoder_layers=SIZES["layers"],
        encoder_attention_heads=SIZES["heads"], decoder_attention_heads=SIZES["heads"],
        encoder_ffn_dim=SIZES["ffn_dim"], decoder_ffn_dim=SIZES["ffn_dim"], max_position_embeddings=1024,
        activation_function="relu", dropout=dropout, scale_embedding=True, share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True, pad_token_id=PAD_ID, eos_token_id=EOS_ID, bos_token_id=BOS_ID,
        decoder_start_token_id=BOS_ID, forced_eos_token_id=None,
    )
    return MarianMTModel(cfg).eval()
