"""Real inputs for the batch-inference tests: text-line images drawn with Pillow, and the
zoo's PP-OCR text-direction classifier (``ppocr_v2_cls``: x float32 (N, 3, 48, 192) ->
(N, 2) softmax over {0°, 180°}) that reads them.

The images are what the classifier is made for — a line of printed words, upright or turned
by 180° — drawn deterministically from a seed with Pillow's bundled font, so every run of the
tests sees the same pixels without a download.
"""

from __future__ import annotations

import numpy as np

MODEL = "ppocr_v2_cls"
SIZE = (48, 192)  # H, W of the classifier's input
# NOTE: PaddleOCR's ClsPreprocess: (pixel / 255 - 0.5) / 0.5 on every channel
MEAN, STD = 0.5, 0.5
WORDS = ("invoice", "total", "amount", "date", "sprat", "model", "batch", "ray", "paid",
         "order", "number", "2024", "EUR", "street", "city", "name", "qty", "42.00")


def text_line(rng: np.random.Generator):
    """One RGB text-line image (PIL.Image, W x H about 4:1) and its label (1 = turned 180°)."""
    from PIL import Image, ImageDraw, ImageFont

    h = int(rng.integers(40, 64))
    w = int(h * rng.uniform(3.5, 4.5))
    bg = tuple(int(v) for v in rng.integers(200, 256, 3))
    fg = tuple(int(v) for v in rng.integers(0, 60, 3))
    img = Image.new("RGB", (w, h), bg)
    font = ImageFont.load_default(size=int(h * 0.55))
    text = " ".join(rng.choice(WORDS, size=int(rng.integers(2, 4))))
    ImageDraw.Draw(img).text((int(rng.integers(2, 8)), int(h * 0.18)), text, fill=fg,
                             font=font)
    label = int(rng.integers(0, 2))
    if label:
        img = img.rotate(180)
    return img, label


def text_lines(n: int, seed: int = 0):
    """``n`` (image, label) pairs from ``seed``."""
    rng = np.random.default_rng(seed)
    return [text_line(rng) for _ in range(n)]


def to_tensor(img) -> np.ndarray:
    """An image as the classifier's input row: float32 (3, 48, 192), as ``sprat batch
    --size 48 192 --mean 0.5 --std 0.5`` makes it (bilinear resize, NCHW)."""
    from PIL import Image

    x = np.asarray(img.convert("RGB").resize(SIZE[::-1], Image.Resampling.BILINEAR))
    x = (x.astype(np.float32) / 255.0 - np.float32(MEAN)) / np.float32(STD)
    return np.ascontiguousarray(x.transpose(2, 0, 1))


def write_pngs(folder, n: int, seed: int = 0) -> list:
    """Write ``n`` text-line PNGs named ``line_0000.png``...; returns (path, label) pairs."""
    out = []
    for i, (img, label) in enumerate(text_lines(n, seed)):
        path = folder / f"line_{i:04d}.png"
        img.save(path)
        out.append((path, label))
    return out
