# SPDX-License-Identifier: Apache-2.0
"""Writes tests/python/data/waveorder_3_0_2_reference.npz: small optics arrays computed by waveorder.

The reference package is waveorder 3.0.2 (the newest release on PyPI), run on the CPU in its own
float32 / complex64. It is needed only to regenerate the file, never by the tests, so it lives in
a throw-away venv that borrows torch and numpy from the project's venv:

    python3 -m venv /tmp/wovenv
    echo "$PWD/.venv/lib/python3.11/site-packages" > /tmp/wovenv/lib/python3.11/site-packages/project.pth
    .venv/bin/python -m pip download waveorder==3.0.2 --no-deps -d /tmp/wo
    /tmp/wovenv/bin/python -m pip install --no-deps /tmp/wo/waveorder-3.0.2-py3-none-any.whl
    /tmp/wovenv/bin/python -m pip install scipy pywavelets matplotlib pydantic tqdm  # its imports
    /tmp/wovenv/bin/python scripts/make_waveorder_reference.py

(the file in the repository was made with torch 2.11.0, numpy 2.4.6, scipy 1.17.1; wheel sha256
6ef3e4f5ae67bbf36726a9c3a3f64f61f812f1b64bef7d340ed6c02feca881e6).

Cases (the settings of each are stored in the file as JSON, key "settings"): four thin transfer
functions (upsampling factors 1, 2 and 3, odd sizes, tilt, a batch of tilts, NAi >= NAd,
invert_phase_contrast), the thin forward model, two 2-D reconstructions with the SVD filter
(shared and per-tile transfer functions) with the filters themselves, mid-band powers, the shared
3-D optics, two thick transfer functions (with and without Nyquist upsampling) and a 3-D
reconstruction. Every grid is checked to keep its frequencies away from the steep pupil edge and
the mid-band mask edges, so float32 rounding cannot flip a sample between the two sides.
"""

from __future__ import annotations

import json
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import torch
from waveorder import focus, util
from waveorder.models import isotropic_thin_3d, phase_thick_3d
from waveorder.optim.losses import MidbandPowerLossSettings, build_loss_fn
from waveorder.reconstruct import tikhonov_regularized_inverse_filter

OUT = Path(__file__).resolve().parent.parent / "tests/python/data/waveorder_3_0_2_reference.npz"
SEED = 20250615
REGULARIZATION = 1e-3

THIN_CASES = {
    # Upsampling factor 1, no tilt: Hu(0) = 2 at z = 0.
    "thin0": dict(
        yx_shape=[16, 12],
        pixel_size=0.2,
        wavelength=0.532,
        index_medium=1.0,
        na_illumination=0.4,
        na_detection=0.55,
        z_spacing=0.5,
        Z=5,
        z_offset=0.0,
        zenith=0.0,
        azimuth=0.0,
        pupil_steepness=1e4,
        invert_phase_contrast=False,
    ),
    # Factor 2 on an odd height (the crop is off centre by one bin there), tilt, inverted
    # contrast, a moderate pupil steepness.
    "thin1": dict(
        yx_shape=[15, 12],
        pixel_size=0.4,
        wavelength=0.532,
        index_medium=1.33,
        na_illumination=0.3,
        na_detection=0.6,
        z_spacing=0.6,
        Z=5,
        z_offset=0.3,
        zenith=0.25,
        azimuth=0.9,
        pupil_steepness=200.0,
        invert_phase_contrast=True,
    ),
    # A batch of two tilts, NAi >= NAd (clamped to 0.9·NAd; the factor uses the given NAi).
    "thin2": dict(
        yx_shape=[12, 16],
        pixel_size=0.2,
        wavelength=0.532,
        index_medium=1.0,
        na_illumination=0.6,
        na_detection=0.55,
        z_spacing=0.4,
        Z=7,
        z_offset=0.0,
        zenith=[0.1, 0.3],
        azimuth=[0.5, -1.2],
        pupil_steepness=1e4,
        invert_phase_contrast=False,
    ),
    # Factor 3 on odd sizes.
    "thin3": dict(
        yx_shape=[9, 11],
        pixel_size=0.7,
        wavelength=0.532,
        index_medium=1.0,
        na_illumination=0.4,
        na_detection=0.55,
        z_spacing=0.5,
        Z=3,
        z_offset=-0.25,
        zenith=0.15,
        azimuth=-0.4,
        pupil_steepness=1e4,
        invert_phase_contrast=False,
    ),
}

SHARED_CASES = {
    "shared0": dict(
        zyx_shape=[6, 16, 12],
        yx_pixel_size=0.2,
        z_pixel_size=0.3,
        wavelength=0.532,
        index_medium=1.33,
        na_detection=0.55,
        z_padding=1,
        pupil_steepness=1e4,
        invert_phase_contrast=False,
    ),
    "shared1": dict(
        zyx_shape=[5, 9, 10],
        yx_pixel_size=0.25,
        z_pixel_size=0.4,
        wavelength=0.532,
        index_medium=1.0,
        na_detection=0.7,
        z_padding=0,
        pupil_steepness=100.0,
        invert_phase_contrast=True,
    ),
}

THICK_CASES = {
    # No upsampling, padding, tilt.
    "thick0": dict(
        zyx_shape=[6, 16, 12],
        yx_pixel_size=0.2,
        z_pixel_size=0.5,
        wavelength=0.532,
        index_medium=1.33,
        na_illumination=0.4,
        na_detection=0.55,
        z_padding=1,
        zenith=0.2,
        azimuth=0.6,
        pupil_steepness=1e4,
        invert_phase_contrast=False,
    ),
    # Factors 2 in z and in y, x; padding (not upsampled by the reference), inverted contrast.
    "thick1": dict(
        zyx_shape=[5, 12, 10],
        yx_pixel_size=0.3,
        z_pixel_size=0.6,
        wavelength=0.532,
        index_medium=1.0,
        na_illumination=0.5,
        na_detection=0.9,
        z_padding=1,
        zenith=0.0,
        azimuth=0.0,
        pupil_steepness=1e4,
        invert_phase_contrast=True,
    ),
}

# 2-D reconstructions: the thin case whose transfer functions they use, and the tile count.
RECON_CASES = {"recon0": dict(tf_case="thin0", tiles=2), "recon1": dict(tf_case="thin2", tiles=2)}
BANDS = {"band0": [0.125, 0.25], "band1": [0.1, 0.5]}


def z_list(case) -> list[float]:
    """(−k + ⌊Z/2⌋ + offset)·Δz, k = 0..Z−1 (the optimiser's convention)."""
    Z = case["Z"]
    return [(-k + Z // 2 + case["z_offset"]) * case["z_spacing"] for k in range(Z)]


def _min_distance(yx_shape, pixel_size, edges) -> float:
    fy = np.fft.fftfreq(yx_shape[0], pixel_size)
    fx = np.fft.fftfreq(yx_shape[1], pixel_size)
    fr = np.hypot(*np.meshgrid(fy, fx, indexing="ij"))
    return min(float(np.min(np.abs(fr - edge))) for edge in edges)


def check_pupil_edge(yx_shape, pixel_size, wavelength, na_detection, steepness, factor):
    """The steep pupil σ(s·(NAd/λ − |f|)) must be saturated (or smooth) on every grid sample."""
    up = [n * factor for n in yx_shape]
    distance = _min_distance(up, pixel_size / factor, [na_detection / wavelength])
    if steepness * distance < 10 and steepness > 1e3:
        sys.exit(
            f"a frequency lies {distance:.2e} from the pupil edge on {up}: pick other settings"
        )


def check_band_edges(yx_shape, pixel_size, wavelength, na_detection, band):
    cutoff = 2 * na_detection / wavelength
    distance = _min_distance(yx_shape, pixel_size, [band[0] * cutoff, band[1] * cutoff])
    if distance < 1e-4 * cutoff:
        sys.exit(f"a frequency lies {distance:.2e} from a mid-band edge: pick other settings")


def thin_factor(case) -> int:
    nyquist = case["wavelength"] / (2 * (case["na_detection"] + case["na_illumination"]))
    return int(math.ceil(case["pixel_size"] / nyquist))


def smooth_field(generator, shape, sigma_pixels, amplitude):
    """Gaussian-filtered white noise (low-pass in Fourier space), zero mean, peak `amplitude`."""
    noise = torch.randn(shape, generator=generator, dtype=torch.float64)
    fy = torch.fft.fftfreq(shape[-2], dtype=torch.float64)
    fx = torch.fft.fftfreq(shape[-1], dtype=torch.float64)
    f2 = fy[:, None] ** 2 + fx[None, :] ** 2
    field = torch.real(
        torch.fft.ifft2(torch.fft.fft2(noise) * torch.exp(-2 * (math.pi * sigma_pixels) ** 2 * f2))
    )
    field = field - field.mean(dim=(-2, -1), keepdim=True)
    return (amplitude * field / field.abs().amax(dim=(-2, -1), keepdim=True)).float()


def main() -> None:
    torch.manual_seed(SEED)
    generator = torch.Generator().manual_seed(SEED)
    arrays: dict[str, np.ndarray] = {}
    settings: dict[str, dict] = {}

    def put(name, tensor):
        arrays[name] = tensor.detach().cpu().numpy()

    tfs = {}
    for name, case in THIN_CASES.items():
        check_pupil_edge(
            case["yx_shape"],
            case["pixel_size"],
            case["wavelength"],
            case["na_detection"],
            case["pupil_steepness"],
            thin_factor(case),
        )
        zenith, azimuth = case["zenith"], case["azimuth"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # thin2 clamps NAi on purpose
            hu, hp = isotropic_thin_3d.calculate_transfer_function(
                tuple(case["yx_shape"]),
                case["pixel_size"],
                z_list(case),
                case["wavelength"],
                case["index_medium"],
                case["na_illumination"],
                case["na_detection"],
                invert_phase_contrast=case["invert_phase_contrast"],
                tilt_angle_zenith=torch.tensor(zenith) if isinstance(zenith, list) else zenith,
                tilt_angle_azimuth=torch.tensor(azimuth) if isinstance(azimuth, list) else azimuth,
                pupil_steepness=case["pupil_steepness"],
            )
        tfs[name] = (hu, hp)
        settings[name] = {**case, "z_positions": z_list(case), "factor": thin_factor(case)}
        put(f"{name}/absorption_tf", hu)
        put(f"{name}/phase_tf", hp)

    # The thin forward model (background 10) and 2-D reconstructions with the SVD filter.
    for name, recon in RECON_CASES.items():
        case = THIN_CASES[recon["tf_case"]]
        hu, hp = tfs[recon["tf_case"]]
        B, (Y, X) = recon["tiles"], case["yx_shape"]
        absorption = smooth_field(generator, (B, Y, X), 1.5, 0.05)
        phase = smooth_field(generator, (B, Y, X), 1.2, 0.5)
        per_tile = hu.ndim == 4
        data = torch.stack(
            [
                isotropic_thin_3d.apply_transfer_function(
                    absorption[b], phase[b], hu[b] if per_tile else hu, hp[b] if per_tile else hp
                )
                for b in range(B)
            ]
        )
        put(f"{name}/object_absorption", absorption)
        put(f"{name}/object_phase", phase)
        put(f"{name}/forward", data)  # noise-free: the forward model's own output
        data = data * (1 + 0.01 * torch.randn(data.shape, generator=generator))
        singular_system = isotropic_thin_3d.calculate_singular_system(hu, hp, use_svd=True)
        u, s, vh = singular_system
        # waveorder's filter bank is [Z, 2, ...]; fieldfuse's tikhonov_filter is [..., 2, Z, Y, X].
        bank = torch.einsum("...sjyx,...jyx,...jzyx->...szyx", u, s / (s**2 + REGULARIZATION), vh)
        rec_absorption, rec_phase = isotropic_thin_3d.apply_inverse_transfer_function(
            data, singular_system, regularization_strength=REGULARIZATION
        )
        settings[name] = {**recon, "regularization": REGULARIZATION, "background": 10.0}
        put(f"{name}/data", data)
        put(f"{name}/filter", bank)
        put(f"{name}/absorption", rec_absorption)
        put(f"{name}/phase", rec_phase)
        for band_name, band in BANDS.items():
            check_band_edges(
                (Y, X), case["pixel_size"], case["wavelength"], case["na_detection"], band
            )
            power = focus.compute_midband_power(
                rec_phase, case["na_detection"], case["wavelength"], case["pixel_size"], tuple(band)
            )
            loss_fn = build_loss_fn(
                MidbandPowerLossSettings(midband_fractions=band),
                case["na_detection"],
                case["wavelength"],
                case["pixel_size"],
            )
            put(f"{name}/{band_name}/power_sum", power)
            put(f"{name}/{band_name}/loss", torch.stack([loss_fn(rec_phase[b]) for b in range(B)]))
        settings[name]["bands"] = BANDS

    for name, case in SHARED_CASES.items():
        _, _, pupil, kernel, greens = phase_thick_3d._compute_shared_optics(
            tuple(case["zyx_shape"]),
            case["yx_pixel_size"],
            case["z_pixel_size"],
            case["wavelength"],
            case["z_padding"],
            case["index_medium"],
            case["na_detection"],
            case["invert_phase_contrast"],
            case["pupil_steepness"],
        )
        check_pupil_edge(
            case["zyx_shape"][1:],
            case["yx_pixel_size"],
            case["wavelength"],
            case["na_detection"],
            case["pupil_steepness"],
            1,
        )
        settings[name] = case
        put(f"{name}/detection_pupil", pupil)
        put(f"{name}/propagation_kernel", kernel)
        put(f"{name}/greens_function", greens)

    for name, case in THICK_CASES.items():
        real_tf, imag_tf = phase_thick_3d.calculate_transfer_function(
            tuple(case["zyx_shape"]),
            case["yx_pixel_size"],
            case["z_pixel_size"],
            case["wavelength"],
            case["z_padding"],
            case["index_medium"],
            case["na_illumination"],
            case["na_detection"],
            invert_phase_contrast=case["invert_phase_contrast"],
            tilt_angle_zenith=case["zenith"],
            tilt_angle_azimuth=case["azimuth"],
            pupil_steepness=case["pupil_steepness"],
        )
        settings[name] = case
        put(f"{name}/real_potential_tf", real_tf)
        put(f"{name}/imag_potential_tf", imag_tf)

    # A 3-D reconstruction with thick0's transfer function: the reference pads by reflection and
    # normalises the whole stack before its Tikhonov step, so both the step's input and the
    # unpadded result are stored.
    case = THICK_CASES["thick0"]
    real_tf = torch.from_numpy(arrays["thick0/real_potential_tf"])
    imag_tf = torch.from_numpy(arrays["thick0/imag_potential_tf"])
    data = 1 + smooth_field(generator, tuple(case["zyx_shape"]), 1.0, 0.1)
    padded = util.inten_normalization_3D(util.pad_zyx_along_z(data, case["z_padding"]))
    inverse = tikhonov_regularized_inverse_filter(real_tf, REGULARIZATION)
    step = torch.real(
        torch.fft.ifftn(torch.fft.fftn(padded, dim=(-3, -2, -1)) * inverse, dim=(-3, -2, -1))
    )
    result = phase_thick_3d.apply_inverse_transfer_function(
        data, real_tf, imag_tf, case["z_padding"], regularization_strength=REGULARIZATION
    )
    settings["inverse3d"] = {"tf_case": "thick0", "regularization": REGULARIZATION}
    put("inverse3d/data", data)
    put("inverse3d/normalized", padded)
    put("inverse3d/filtered", step)
    put("inverse3d/phase", result)

    arrays["settings"] = np.array(json.dumps(settings, sort_keys=True))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
    main()
