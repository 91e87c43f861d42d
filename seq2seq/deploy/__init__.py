"""Running a model outside seq2seq: export to CTranslate2 and Hugging Face transformers, import
from transformers, and translating with a CTranslate2 export."""
