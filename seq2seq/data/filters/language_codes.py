"""Language codes as the filters take them: `base_language("pt_BR") -> "pt"`, `base_language("deu") -> "de"`
(ISO 639-1, what py3langid and the script table use); a code neither knows stays as it is."""

from __future__ import annotations

# ISO 639-2/3 codes of the languages py3langid knows, to their ISO 639-1 codes (NLLB and OPUS name
# languages either way).
THREE_LETTER = {
    "afr": "af", "amh": "am", "ara": "ar", "arb": "ar", "asm": "as", "aze": "az", "bel": "be", "ben": "bn",
    "bos": "bs", "bre": "br", "bul": "bg", "cat": "ca", "ces": "cs", "cze": "cs", "cym": "cy", "wel": "cy",
    "dan": "da", "deu": "de", "ger": "de", "ell": "el", "gre": "el", "eng": "en", "epo": "eo", "est": "et",
    "eus": "eu", "baq": "eu", "fao": "fo", "fas": "fa", "per": "fa", "pes": "fa", "fin": "fi", "fra": "fr",
    "fre": "fr", "gle": "ga", "glg": "gl", "guj": "gu", "heb": "he", "hin": "hi", "hrv": "hr", "hat": "ht",
    "hun": "hu", "hye": "hy", "arm": "hy", "ind": "id", "isl": "is", "ice": "is", "ita": "it", "jpn": "ja",
    "jav": "jv", "kat": "ka", "geo": "ka", "kaz": "kk", "khm": "km", "kan": "kn", "kor": "ko", "kur": "ku",
    "kir": "ky", "lat": "la", "ltz": "lb", "lao": "lo", "lit": "lt", "lav": "lv", "lvs": "lv", "mlg": "mg",
    "mkd": "mk", "mac": "mk", "mal": "ml", "mon": "mn", "mar": "mr", "msa": "ms", "may": "ms", "zsm": "ms",
    "mlt": "mt", "nep": "ne", "npi": "ne", "nld": "nl", "dut": "nl", "nno": "nn", "nob": "nb", "nor": "no",
    "oci": "oc", "ori": "or", "ory": "or", "pan": "pa", "pol": "pl", "pus": "ps", "por": "pt", "que": "qu",
    "ron": "ro", "rum": "ro", "rus": "ru", "kin": "rw", "sin": "si", "slk": "sk", "slo": "sk", "slv": "sl",
    "sqi": "sq", "alb": "sq", "als": "sq", "srp": "sr", "swe": "sv", "swa": "sw", "swh": "sw", "tam": "ta",
    "tel": "te", "tha": "th", "tgl": "tl", "tur": "tr", "uig": "ug", "ukr": "uk", "urd": "ur", "vie": "vi",
    "vol": "vo", "wln": "wa", "xho": "xh", "zho": "zh", "chi": "zh", "cmn": "zh", "zul": "zu",
}


def base_language(code: str) -> str:
    """The ISO 639-1 code of a language code: region and script parts dropped ("pt_BR", "zh-Hans",
    "deu_Latn"), three-letter codes mapped where `THREE_LETTER` has them."""
    base = code.replace("-", "_").split("_", 1)[0].lower()
    return THREE_LETTER.get(base, base)
