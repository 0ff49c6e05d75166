//! Image files (PNG, JPEG, GIF's first frame, WebP, BMP) decoded into [`Rgb`] within limits:
//! the header's dimensions are checked before any pixel is decoded, and the decoder may
//! not allocate past [`Limits::max_bytes`], so a decompression bomb or a 100k × 100k
//! header costs nothing but the read of its header.

use std::io::Cursor;

use image::{ImageFormat, ImageReader};

use super::Rgb;

/// What an image may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest side, in pixels.
    pub max_side: u32,
    /// What decoding may allocate.
    pub max_bytes: u64,
}

impl Default for Limits {
    /// 8192 pixels a side, 128 MiB (a 5600 × 5600 image with alpha).
    fn default() -> Limits {
        Limits {
            max_side: 8192,
            max_bytes: 128 << 20,
        }
    }
}

/// Why an image was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ImageError {
    #[error("the image's format is not recognized (PNG, JPEG, GIF, WebP and BMP are read)")]
    Format,
    #[error("the image is {width}x{height}; at most {max} pixels a side are read")]
    TooLarge { width: u32, height: u32, max: u32 },
    #[error(
        "the image is {width}x{height}: its pixels would take more than the {max_mib} MiB allowed"
    )]
    TooManyPixels {
        width: u32,
        height: u32,
        max_mib: u64,
    },
    #[error("the image has no pixels")]
    Empty,
    #[error("the image cannot be decoded: {0}")]
    Corrupt(String),
}

/// `bytes` decoded to 8-bit RGB (alpha dropped, gray repeated) within `limits`.
pub fn decode(bytes: &[u8], limits: &Limits) -> Result<Rgb, ImageError> {
    let reader = || -> Result<ImageReader<Cursor<&[u8]>>, ImageError> {
        let r = ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| ImageError::Corrupt(e.to_string()))?;
        match r.format() {
            Some(
                ImageFormat::Png
                | ImageFormat::Jpeg
                | ImageFormat::Gif
                | ImageFormat::WebP
                | ImageFormat::Bmp,
            ) => Ok(r),
            _ => Err(ImageError::Format),
        }
    };
    let (width, height) = reader()?
        .into_dimensions()
        .map_err(|e| ImageError::Corrupt(e.to_string()))?;
    if width == 0 || height == 0 {
        return Err(ImageError::Empty);
    }
    if width.max(height) > limits.max_side {
        return Err(ImageError::TooLarge {
            width,
            height,
            max: limits.max_side,
        });
    }
    let too_many = ImageError::TooManyPixels {
        width,
        height,
        max_mib: limits.max_bytes >> 20,
    };
    if width as u64 * height as u64 * 4 > limits.max_bytes {
        return Err(too_many);
    }
    let mut r = reader()?;
    let mut l = image::Limits::default();
    l.max_image_width = Some(limits.max_side);
    l.max_image_height = Some(limits.max_side);
    l.max_alloc = Some(limits.max_bytes);
    r.limits(l);
    let img = r.decode().map_err(|e| match e {
        image::ImageError::Limits(_) => too_many,
        e => ImageError::Corrupt(e.to_string()),
    })?;
    let rgb = img.into_rgb8();
    Ok(Rgb {
        width: rgb.width() as usize,
        height: rgb.height() as usize,
        data: rgb.into_raw(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn png(width: u32, height: u32) -> Vec<u8> {
        let img = image::RgbImage::from_fn(width, height, |x, y| image::Rgb([x as u8, y as u8, 7]));
        let mut out = Cursor::new(Vec::new());
        img.write_to(&mut out, ImageFormat::Png).unwrap();
        out.into_inner()
    }

    fn crc32(bytes: &[u8]) -> u32 {
        let mut c = !0u32;
        for &b in bytes {
            c ^= b as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
            }
        }
        !c
    }

    #[test]
    fn a_png_decodes_to_its_pixels() {
        let rgb = decode(&png(5, 3), &Limits::default()).unwrap();
        assert_eq!((rgb.width, rgb.height), (5, 3));
        assert_eq!(&rgb.data[(2 * 5 + 4) * 3..][..3], &[4, 2, 7]);
    }

    #[test]
    fn hostile_files_are_refused_by_name() {
        let limits = Limits::default();
        let gif = decode(b"GIF89a\x04\x00\x04\x00-truncated", &limits)
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(gif, ImageError::Corrupt(_)), "{gif}");
        assert_eq!(decode(b"hello, world", &limits), Err(ImageError::Format));
        let mut big = png(4, 4);
        // The IHDR's width and height (bytes 16..24) claim 100000 × 100000.
        big[16..20].copy_from_slice(&100_000u32.to_be_bytes());
        big[20..24].copy_from_slice(&100_000u32.to_be_bytes());
        let crc = crc32(&big[12..29]);
        big[29..33].copy_from_slice(&crc.to_be_bytes());
        assert!(matches!(
            decode(&big, &limits),
            Err(ImageError::TooLarge { width: 100_000, .. })
        ));
        let whole = png(64, 64);
        assert!(matches!(
            decode(&whole[..whole.len() / 2], &limits),
            Err(ImageError::Corrupt(_))
        ));
    }
}
