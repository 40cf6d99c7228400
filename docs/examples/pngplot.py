"""Line charts written as PNG files with the standard library only (zlib and struct).

Enough for the tour's training curves: panels side by side, each an axis box with
tick marks and numbers, a title, and a line per series. No plotting library, so
the tour needs nothing beyond td's own dependencies.

    save_line_charts("training.png", [Panel("loss", [Series(steps, losses, BLUE)])])
"""

from __future__ import annotations

import itertools
import math
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

Color = tuple[int, int, int]
WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GREY: Color = (225, 225, 225)
BLUE: Color = (31, 119, 180)
ORANGE: Color = (230, 110, 0)

# A 5x7 pixel font: each glyph is 7 rows, top first, as 2 hex digits (bit 4 is the left column).
_FONT = {
    "0": "0E11131519110E", "1": "040C040404040E", "2": "0E11010204081F", "3": "1F02040201110E",
    "4": "02060A121F0202", "5": "1F101E0101110E", "6": "0608101E11110E", "7": "1F010204080808",
    "8": "0E11110E11110E", "9": "0E11110F01020C", ".": "00000000000C0C", "-": "0000001F000000",
    "%": "18190204081303", " ": "00000000000000", "(": "02040808080402", ")": "08040202020408",
    ",": "000000000C0408", ":": "000C0C000C0C00", "a": "00000E010F110F", "b": "1010161911111E",
    "c": "00000E1010110E", "d": "01010D1311110F", "e": "00000E111F100E", "f": "0609081C080808",
    "g": "00000F110F010E", "h": "10101619111111", "i": "04000C0404040E", "j": "0200060202120C",
    "k": "10101214181412", "l": "0C04040404040E", "m": "00001A15151111", "n": "00001619111111",
    "o": "00000E1111110E", "p": "00001E111E1010", "q": "00000D130F0101", "r": "00001619101010",
    "s": "00000E100E011E", "t": "08081C08080906", "u": "0000111111130D", "v": "00001111110A04",
    "w": "0000111115150A", "x": "0000110A040A11", "y": "000011110F010E", "z": "00001F0204081F",
}  # fmt: skip


@dataclass
class Series:
    """One line: y values over x values, in a color."""

    xs: Sequence[float]
    ys: Sequence[float]
    color: Color = BLUE
    label: str = ""


@dataclass
class Panel:
    """One chart: a title, its series, and optionally a fixed y range."""

    title: str
    series: list[Series] = field(default_factory=list)
    y_range: tuple[float, float] | None = None


class Canvas:
    """An RGB image in memory, drawn on pixel by pixel."""

    def __init__(self, width: int, height: int, background: Color = WHITE) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(bytes(background) * (width * height))

    def dot(self, x: float, y: float, color: Color, size: int = 1) -> None:
        """A `size` x `size` square at (x, y); parts outside the canvas are dropped."""
        x0, y0 = round(x), round(y)
        for yy in range(y0, y0 + size):
            for xx in range(x0, x0 + size):
                if 0 <= xx < self.width and 0 <= yy < self.height:
                    i = 3 * (yy * self.width + xx)
                    self.pixels[i : i + 3] = bytes(color)

    def line(self, x0: float, y0: float, x1: float, y1: float, color: Color, size: int = 1) -> None:
        """A straight line, one dot per pixel step along its longer side."""
        n = max(round(abs(x1 - x0)), round(abs(y1 - y0)), 1)
        for k in range(n + 1):
            self.dot(x0 + (x1 - x0) * k / n, y0 + (y1 - y0) * k / n, color, size)

    def box(self, x0: float, y0: float, x1: float, y1: float, color: Color) -> None:
        for xa, ya, xb, yb in (
            (x0, y0, x1, y0),
            (x1, y0, x1, y1),
            (x1, y1, x0, y1),
            (x0, y1, x0, y0),
        ):
            self.line(xa, ya, xb, yb, color)

    def text(
        self, x: float, y: float, text: str, color: Color = BLACK, align: str = "left"
    ) -> None:
        """`text` (lowercase letters, digits, `.-%(),:`) with its top at `y`."""
        width = 6 * len(text) - 1
        x -= {"left": 0, "center": width / 2, "right": width}[align]
        for i, char in enumerate(text.lower()):
            rows = bytes.fromhex(_FONT.get(char, _FONT[" "]))
            for r, bits in enumerate(rows):
                for c in range(5):
                    if bits >> (4 - c) & 1:
                        self.dot(x + 6 * i + c, y + r, color)

    def png(self) -> bytes:
        """The image as a PNG file: 8-bit RGB, no interlacing, one zlib stream."""
        stride = 3 * self.width
        raw = b"".join(
            b"\x00" + self.pixels[y * stride : (y + 1) * stride] for y in range(self.height)
        )  # filter type 0 (none) before each row

        def chunk(kind: bytes, data: bytes) -> bytes:
            return (
                struct.pack(">I", len(data))
                + kind
                + data
                + struct.pack(">I", zlib.crc32(kind + data))
            )

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return b"".join(
            (
                b"\x89PNG\r\n\x1a\n",
                chunk(b"IHDR", header),
                chunk(b"IDAT", zlib.compress(raw, 6)),
                chunk(b"IEND", b""),
            )
        )


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About `count` round values (1, 2 or 5 times a power of ten apart) covering [lo, hi]."""
    if hi <= lo:
        lo, hi = lo - 0.5, hi + 0.5
    raw = (hi - lo) / count
    step = min(
        (m * 10 ** math.floor(math.log10(raw)) for m in (1, 2, 5, 10)), key=lambda s: abs(s - raw)
    )
    first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
    return [round(k * step, 12) for k in range(first, last + 1)]


def _label(value: float) -> str:
    return f"{value:.4g}" if abs(value) >= 1e-9 else "0"


def draw_panel(canvas: Canvas, panel: Panel, left: int, top: int, width: int, height: int) -> None:
    """One chart in the canvas rectangle (left, top, width, height), margins included."""
    x0, y0, x1, y1 = left + 50, top + 22, left + width - 12, top + height - 30
    xs = [x for s in panel.series for x in s.xs] or [0.0, 1.0]
    ys = [y for s in panel.series for y in s.ys] or [0.0, 1.0]
    x_lo, x_hi = min(xs), max(xs)  # the data's x range, ticks inside it
    x_ticks = [t for t in nice_ticks(x_lo, x_hi) if x_lo <= t <= x_hi]
    if panel.y_range is None:  # the y range grows to the round ticks around the data
        y_ticks = nice_ticks(min(ys), max(ys))
        y_lo, y_hi = y_ticks[0], y_ticks[-1]
    else:
        y_lo, y_hi = panel.y_range
        y_ticks = [t for t in nice_ticks(y_lo, y_hi) if y_lo <= t <= y_hi]

    def px(x: float) -> float:
        return x0 + (x - x_lo) / ((x_hi - x_lo) or 1.0) * (x1 - x0)

    def py(y: float) -> float:
        return y1 - (y - y_lo) / ((y_hi - y_lo) or 1.0) * (y1 - y0)

    for t in y_ticks:  # light grid lines and ticks with their values
        canvas.line(x0, py(t), x1, py(t), GREY)
        canvas.line(x0 - 4, py(t), x0, py(t), BLACK)
        canvas.text(x0 - 7, py(t) - 3, _label(t), align="right")
    for t in x_ticks:
        canvas.line(px(t), y1, px(t), y1 + 4, BLACK)
        canvas.text(px(t), y1 + 8, _label(t), align="center")
    canvas.box(x0, y0, x1, y1, BLACK)
    canvas.text(x0, top + 6, panel.title)
    legend_x = x1
    for s in reversed(panel.series):  # legend, right-aligned above the box
        if s.label:
            legend_x -= 6 * len(s.label)
            canvas.text(legend_x, top + 6, s.label, s.color)
            legend_x -= 20
            canvas.line(legend_x, top + 9, legend_x + 14, top + 9, s.color, size=2)
            legend_x -= 12
    for s in panel.series:
        points = [(px(x), py(min(max(y, y_lo), y_hi))) for x, y in zip(s.xs, s.ys)]
        for (xa, ya), (xb, yb) in itertools.pairwise(points):
            canvas.line(xa, ya, xb, yb, s.color, size=2)
        if len(points) == 1:
            canvas.dot(*points[0], s.color, size=3)


def save_line_charts(
    path: str | Path, panels: Sequence[Panel], panel_size: tuple[int, int] = (440, 300)
) -> Path:
    """Draw `panels` side by side into a PNG file at `path`; returns the path."""
    width, height = panel_size
    canvas = Canvas(width * len(panels), height)
    for i, panel in enumerate(panels):
        draw_panel(canvas, panel, i * width, 0, width, height)
    path = Path(path)
    path.write_bytes(canvas.png())
    return path
