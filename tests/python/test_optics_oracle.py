# SPDX-License-Identifier: Apache-2.0
"""The optics oracle, and the fieldfuse optics API through the same tests, against arrays computed
by waveorder 3.0.2 (tests/python/data/waveorder_3_0_2_reference.npz, made by
scripts/make_waveorder_reference.py); then the oracle's own identities."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optics_oracle as oracle
import pytest
import torch
from optics_support import F32, F64, as64, assert_close_scaled, optics_api

REFERENCE = Path(__file__).parent / "data" / "waveorder_3_0_2_reference.npz"

# The reference ran in float32 / complex64: its transfer functions carry the rounding of FFTs of up
# to ~1000 points and of phases 2πz·ob up to ~20 rad, about 3e−6 of their largest coefficient (the
# oracle in float64 measures at most 3.0e−6 on the propagation kernel, 6.3e−6 on the SVD filter
# whose small singular values amplify it). A float32 implementation adds as much again.
REL = 2e-5

IMPLS = ["oracle", "fieldfuse"]


@pytest.fixture(scope="module")
def ref():
    with np.load(REFERENCE) as archive:
        arrays = {key: archive[key] for key in archive.files}
    arrays["settings"] = json.loads(str(arrays["settings"]))
    return arrays


class Impl:
    """One implementation under test: the oracle in float64, or fieldfuse.optics in float32 (the
    reference's own precision), called with the same arguments."""

    def __init__(self, name: str):
        self.name = name
        self.dtype = F64 if name == "oracle" else F32

    def fn(self, op: str):
        return getattr(oracle, op) if self.name == "oracle" else optics_api(op)

    def builder_kwargs(self) -> dict:
        """The dtype keyword of the transfer-function builders (the oracle is float64 only)."""
        return {} if self.name == "oracle" else {"dtype": F32}

    def tensor(self, array) -> torch.Tensor:
        """A reference array (or number list) as this implementation's input."""
        tensor = torch.as_tensor(np.asarray(array))
        if self.name == "oracle":
            return as64(tensor)
        return tensor.to(torch.complex64 if tensor.is_complex() else F32)

    def angle(self, value):
        """A float stays a float; a list becomes a [B] tensor."""
        return self.tensor(value) if isinstance(value, list) else value


@pytest.fixture(params=IMPLS)
def impl(request):
    return Impl(request.param)


@pytest.mark.parametrize("case", ["thin0", "thin1", "thin2", "thin3"])
def test_thin_transfer_functions_match_waveorder(impl, ref, case):
    s = ref["settings"][case]
    hu, hp = impl.fn("thin_transfer_functions")(
        tuple(s["yx_shape"]),
        s["pixel_size"],
        impl.tensor(s["z_positions"]),
        s["wavelength"],
        s["index_medium"],
        s["na_illumination"],
        s["na_detection"],
        zenith=impl.angle(s["zenith"]),
        azimuth=impl.angle(s["azimuth"]),
        pupil_steepness=s["pupil_steepness"],
        invert_phase_contrast=s["invert_phase_contrast"],
        **impl.builder_kwargs(),
    )
    assert_close_scaled(hu, ref[f"{case}/absorption_tf"], rel=REL, what=f"{case} absorption_tf")
    assert_close_scaled(hp, ref[f"{case}/phase_tf"], rel=REL, what=f"{case} phase_tf")


def test_z_positions_match_the_reference_lists(impl, ref):
    for case in ("thin0", "thin1", "thin2", "thin3"):
        s = ref["settings"][case]
        z = impl.fn("z_positions")(s["Z"], s["z_spacing"], s["z_offset"])
        assert_close_scaled(z, torch.tensor(s["z_positions"]), rel=1e-6, what=case)


@pytest.mark.parametrize("case", ["shared0", "shared1"])
def test_shared_optics_match_waveorder(impl, ref, case):
    s = ref["settings"][case]
    pupil, kernel, greens = impl.fn("shared_optics_3d")(
        tuple(s["zyx_shape"]),
        s["yx_pixel_size"],
        s["z_pixel_size"],
        s["wavelength"],
        s["index_medium"],
        s["na_detection"],
        z_padding=s["z_padding"],
        pupil_steepness=s["pupil_steepness"],
        invert_phase_contrast=s["invert_phase_contrast"],
        **impl.builder_kwargs(),
    )
    assert not pupil.is_complex()
    assert_close_scaled(pupil, ref[f"{case}/detection_pupil"], rel=REL, what="detection_pupil")
    assert_close_scaled(
        kernel, ref[f"{case}/propagation_kernel"], rel=REL, what="propagation_kernel"
    )
    assert_close_scaled(greens, ref[f"{case}/greens_function"], rel=REL, what="greens_function")


@pytest.mark.parametrize("case", ["thick0", "thick1"])
def test_thick_transfer_function_matches_waveorder(impl, ref, case):
    s = ref["settings"][case]
    real_tf, imag_tf = impl.fn("thick_transfer_function")(
        tuple(s["zyx_shape"]),
        s["yx_pixel_size"],
        s["z_pixel_size"],
        s["wavelength"],
        s["index_medium"],
        s["na_illumination"],
        s["na_detection"],
        z_padding=s["z_padding"],
        zenith=s["zenith"],
        azimuth=s["azimuth"],
        pupil_steepness=s["pupil_steepness"],
        invert_phase_contrast=s["invert_phase_contrast"],
        **impl.builder_kwargs(),
    )
    assert_close_scaled(
        real_tf, ref[f"{case}/real_potential_tf"], rel=REL, what="real_potential_tf"
    )
    assert_close_scaled(
        imag_tf, ref[f"{case}/imag_potential_tf"], rel=REL, what="imag_potential_tf"
    )


def _recon_inputs(impl, ref, case):
    tf_case = ref["settings"][case]["tf_case"]
    return impl.tensor(ref[f"{tf_case}/absorption_tf"]), impl.tensor(ref[f"{tf_case}/phase_tf"])


@pytest.mark.parametrize("case", ["recon0", "recon1"])
def test_tikhonov_filter_matches_waveorder_svd(impl, ref, case):
    hu, hp = _recon_inputs(impl, ref, case)
    reg = ref["settings"][case]["regularization"]
    assert_close_scaled(
        impl.fn("tikhonov_filter")(hu, hp, reg), ref[f"{case}/filter"], rel=REL, what="filter"
    )
    if impl.name == "oracle":
        assert_close_scaled(
            oracle.svd_filter(hu, hp, reg), ref[f"{case}/filter"], rel=REL, what="svd"
        )


@pytest.mark.parametrize("case", ["recon0", "recon1"])
def test_tikhonov_inverse_matches_waveorder(impl, ref, case):
    hu, hp = _recon_inputs(impl, ref, case)
    reg = ref["settings"][case]["regularization"]
    absorption, phase = impl.fn("tikhonov_inverse")(impl.tensor(ref[f"{case}/data"]), hu, hp, reg)
    assert_close_scaled(absorption, ref[f"{case}/absorption"], rel=REL, what="absorption")
    assert_close_scaled(phase, ref[f"{case}/phase"], rel=REL, what="phase")


@pytest.mark.parametrize("case", ["recon0", "recon1"])
def test_thin_forward_model_matches_waveorder(impl, ref, case):
    hu, hp = _recon_inputs(impl, ref, case)
    background = ref["settings"][case]["background"]
    data = impl.fn("thin_forward_model")(
        impl.tensor(ref[f"{case}/object_absorption"]),
        impl.tensor(ref[f"{case}/object_phase"]),
        hu,
        hp,
        background,
    )
    assert_close_scaled(data, ref[f"{case}/forward"], rel=REL, what="forward")


@pytest.mark.parametrize("band_name", ["band0", "band1"])
@pytest.mark.parametrize("case", ["recon0", "recon1"])
def test_midband_power_matches_waveorder(impl, ref, case, band_name):
    s = ref["settings"][case]
    t = ref["settings"][s["tf_case"]]
    band = tuple(s["bands"][band_name])
    image = impl.tensor(ref[f"{case}/phase"])
    power = impl.fn("midband_power")(
        image, t["pixel_size"], t["wavelength"], t["na_detection"], band
    )
    # waveorder's loss is −Σ_mask|FFT| / n_mask: the API returns the mean itself.
    assert_close_scaled(power, -ref[f"{case}/{band_name}/loss"], rel=REL, what="midband_power")
    count = int(
        oracle.midband_mask(
            image.shape[-2:], t["pixel_size"], t["wavelength"], t["na_detection"], band
        ).sum()
    )
    assert_close_scaled(
        power * count, ref[f"{case}/{band_name}/power_sum"], rel=REL, what="power sum"
    )


def test_tikhonov_inverse_3d_matches_waveorder(impl, ref):
    s = ref["settings"]["inverse3d"]
    pad = ref["settings"][s["tf_case"]]["z_padding"]
    tf = impl.tensor(ref[f"{s['tf_case']}/real_potential_tf"])
    out = impl.fn("tikhonov_inverse_3d")(
        impl.tensor(ref["inverse3d/normalized"]), tf, s["regularization"]
    )
    assert_close_scaled(out, ref["inverse3d/filtered"], rel=REL, what="filtered")
    assert_close_scaled(out[pad:-pad], ref["inverse3d/phase"], rel=REL, what="unpadded")


def test_reference_inputs_of_the_3d_inverse_follow_the_oracle_normalisation(ref):
    """The stored input of the 3-D step is the data padded by reflection and normalised as a
    whole stack (waveorder's preprocessing, which the 3-D op leaves to the caller)."""
    pad = ref["settings"]["thick0"]["z_padding"]
    data = as64(ref["inverse3d/data"])
    padded = torch.cat((data[:pad].flip(0), data, data[-pad:].flip(0)))
    assert_close_scaled(
        oracle.normalize_intensity_3d(padded), ref["inverse3d/normalized"], rel=1e-6
    )


# --- the oracle's own identities -------------------------------------------------------------------


def _random_tfs(generator, shape):
    def draw():
        return torch.complex(
            torch.randn(shape, generator=generator, dtype=F64),
            torch.randn(shape, generator=generator, dtype=F64),
        )

    return draw(), draw()


@pytest.mark.parametrize(
    "kind", ["random", "parallel_rows", "zero_phase_row", "all_zero", "single_slice"]
)
def test_closed_form_filter_equals_the_svd_filter(rng, kind):
    shape = (2, 1 if kind == "single_slice" else 5, 4, 3)
    hu, hp = _random_tfs(rng, shape)
    if kind == "parallel_rows":  # rank 1 at every frequency
        hp = (0.3 - 0.7j) * hu
    elif kind == "zero_phase_row":
        hp = torch.zeros_like(hp)
    elif kind == "all_zero":
        hu, hp = torch.zeros_like(hu), torch.zeros_like(hp)
    for reg in (1e-3, 0.5):
        closed = oracle.tikhonov_filter(hu, hp, reg)
        assert closed.shape == (2, 2) + shape[1:]
        torch.testing.assert_close(closed, oracle.svd_filter(hu, hp, reg), rtol=1e-10, atol=1e-12)


def test_thin_transfer_functions_second_half_is_the_mirrored_conjugate():
    """H2(k) = conj(H1(−k)), which the kernels exploit: the oracle computes H2 by its own FFTs."""
    fyy, fxx = oracle.frequencies((9, 8), 0.2)
    fr = oracle.radial_frequency(fyy, fxx)
    pupil = oracle.detection_pupil(fr, 0.55, 0.532, 100.0)
    defocus = pupil * oracle.propagation_kernel(fr, pupil, 0.532, torch.tensor([0.7], dtype=F64))
    s = oracle.tilted_pupil(fxx, fyy, 0.2, 0.3, 0.532, 1.0, 0.3, 0.8)
    sd_hat, d_hat = torch.fft.fft2(s * defocus), torch.fft.fft2(defocus)
    h1 = torch.fft.ifft2(torch.conj(sd_hat) * d_hat)
    h2 = torch.fft.ifft2(sd_hat * torch.conj(d_hat))
    mirrored = torch.roll(torch.flip(h1, dims=(-2, -1)), shifts=(1, 1), dims=(-2, -1))
    torch.testing.assert_close(h2, torch.conj(mirrored))


def test_z_positions_batched_offsets():
    z = oracle.z_positions(4, 0.5, torch.tensor([0.0, 1.0], dtype=F64))
    expected = torch.tensor([[1.0, 0.5, 0.0, -0.5], [1.5, 1.0, 0.5, 0.0]], dtype=F64)
    torch.testing.assert_close(z, expected)
