"""Text as people write it: lines of several sentences, capitals, and (wave 6) documents, inline markup and
non-translatables, translated through any engine and put back as they came (docs/documents.md).

The layer sits above `inference` (it calls an engine's `translate_nbest`) and below `training`; the
command line, the server and the Python API (`seq2seq.translate_lines`) use it for text sources.
"""
