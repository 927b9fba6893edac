"""flatc output for ``sprat.fbs`` lives in ``sprat_fb/`` (not this file, which is hand-written).

Regenerate from the repo root with: ``flatc --python -o sprat/format/_generated sprat/format/sprat.fbs``
"""
