//! The user×item interaction matrix ALS trains on, held twice: by user and by item.
//!
//! Each ALS half-iteration walks the matrix one way (a user's items, then an item's users), so
//! both compressed-row layouts are built once up front rather than scattering per iteration.
//! Weights are stored raw; confidence (`1 + alpha × weight`) is applied at train time, so one
//! `Interactions` can be trained with several `alpha`s.

use std::fmt;

/// User×item interactions: `(user row, item row, weight)` triples summed per pair, stored
/// compressed by user and by item. Pairs whose summed weight is `<= 0` (or not finite) are
/// dropped.
#[derive(Clone, Default, PartialEq)]
pub struct Interactions {
    users: usize,
    items: usize,
    by_user: Csr,
    by_item: Csr,
}

impl fmt::Debug for Interactions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Interactions")
            .field("users", &self.users)
            .field("items", &self.items)
            .field("nnz", &self.nnz())
            .finish_non_exhaustive()
    }
}

impl Interactions {
    /// Builds the matrix of `users` rows and `items` columns from triples in any order.
    ///
    /// # Panics
    /// If a user row is `>= users` or an item row is `>= items`.
    pub fn from_triples(
        users: usize,
        items: usize,
        triples: impl IntoIterator<Item = (u32, u32, f32)>,
    ) -> Self {
        let triples: Vec<(u32, u32, f32)> = triples.into_iter().collect();
        for &(u, i, _) in &triples {
            assert!(
                (u as usize) < users,
                "user row {u} out of range for {users} users"
            );
            assert!(
                (i as usize) < items,
                "item row {i} out of range for {items} items"
            );
        }
        let by_user = Csr::from_pairs(users, &triples);
        let by_item = by_user.transpose(items);
        Self {
            users,
            items,
            by_user,
            by_item,
        }
    }

    /// The number of user rows.
    pub fn users(&self) -> usize {
        self.users
    }

    /// The number of item rows.
    pub fn items(&self) -> usize {
        self.items
    }

    /// The number of distinct (user, item) pairs kept.
    pub fn nnz(&self) -> usize {
        self.by_user.indices.len()
    }

    /// User `u`'s items (sorted) and their weights.
    pub fn user_items(&self, u: usize) -> (&[u32], &[f32]) {
        self.by_user.row(u)
    }

    /// Item `i`'s users (sorted) and their weights.
    pub fn item_users(&self, i: usize) -> (&[u32], &[f32]) {
        self.by_item.row(i)
    }

    pub(crate) fn by_user(&self) -> &Csr {
        &self.by_user
    }

    pub(crate) fn by_item(&self) -> &Csr {
        &self.by_item
    }
}

/// A compressed sparse row matrix: row `r`'s columns are `indices[offsets[r]..offsets[r + 1]]`,
/// sorted, with their weights alongside.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Csr {
    offsets: Vec<usize>,
    indices: Vec<u32>,
    weights: Vec<f32>,
}

impl Default for Csr {
    fn default() -> Self {
        Self {
            offsets: vec![0],
            indices: Vec::new(),
            weights: Vec::new(),
        }
    }
}

impl Csr {
    /// Groups `(row, column, weight)` triples by row (a counting sort, linear time), then sorts
    /// each row by column and sums repeated pairs.
    fn from_pairs(rows: usize, triples: &[(u32, u32, f32)]) -> Self {
        let mut counts = vec![0usize; rows + 1];
        for &(r, _, _) in triples {
            counts[r as usize + 1] += 1;
        }
        for r in 0..rows {
            counts[r + 1] += counts[r];
        }
        let mut next = counts.clone();
        let mut cells = vec![(0u32, 0f32); triples.len()];
        for &(r, c, w) in triples {
            cells[next[r as usize]] = (c, w);
            next[r as usize] += 1;
        }

        let mut offsets = Vec::with_capacity(rows + 1);
        let mut indices = Vec::with_capacity(triples.len());
        let mut weights = Vec::with_capacity(triples.len());
        offsets.push(0);
        for r in 0..rows {
            let row = &mut cells[counts[r]..counts[r + 1]];
            // Stable, so repeated pairs are summed in the order given.
            row.sort_by_key(|&(c, _)| c);
            let mut j = 0;
            while j < row.len() {
                let c = row[j].0;
                let mut sum = 0.0f32;
                while j < row.len() && row[j].0 == c {
                    sum += row[j].1;
                    j += 1;
                }
                if sum > 0.0 && sum.is_finite() {
                    indices.push(c);
                    weights.push(sum);
                }
            }
            offsets.push(indices.len());
        }
        Self {
            offsets,
            indices,
            weights,
        }
    }

    /// The same matrix stored by column, `columns` of them. Rows within each column come out
    /// sorted because they are visited in order.
    fn transpose(&self, columns: usize) -> Self {
        let mut offsets = vec![0usize; columns + 1];
        for &c in &self.indices {
            offsets[c as usize + 1] += 1;
        }
        for c in 0..columns {
            offsets[c + 1] += offsets[c];
        }
        let mut next = offsets.clone();
        let mut indices = vec![0u32; self.indices.len()];
        let mut weights = vec![0f32; self.indices.len()];
        for r in 0..self.rows() {
            let (cs, ws) = self.row(r);
            for (&c, &w) in cs.iter().zip(ws) {
                let slot = &mut next[c as usize];
                indices[*slot] = r as u32;
                weights[*slot] = w;
                *slot += 1;
            }
        }
        Self {
            offsets,
            indices,
            weights,
        }
    }

    /// The number of rows.
    pub(crate) fn rows(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Row `r`'s columns and weights.
    pub(crate) fn row(&self, r: usize) -> (&[u32], &[f32]) {
        let range = self.offsets[r]..self.offsets[r + 1];
        (&self.indices[range.clone()], &self.weights[range])
    }

    /// The number of entries in row `r`.
    pub(crate) fn row_len(&self, r: usize) -> usize {
        self.offsets[r + 1] - self.offsets[r]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_repeated_pairs_and_drops_non_positive_ones() {
        let data = Interactions::from_triples(
            3,
            4,
            [
                (0, 2, 1.0),
                (0, 1, 2.0),
                (0, 2, 0.5),
                (1, 3, 1.0),
                (1, 3, -1.0),
                (2, 0, -2.0),
                (2, 1, 1.0),
            ],
        );
        assert_eq!(data.nnz(), 3);
        assert_eq!(data.user_items(0), (&[1u32, 2][..], &[2.0f32, 1.5][..]));
        assert_eq!(data.user_items(1), (&[][..], &[][..]));
        assert_eq!(data.user_items(2), (&[1u32][..], &[1.0f32][..]));
        assert_eq!(data.item_users(1), (&[0u32, 2][..], &[2.0f32, 1.0][..]));
        assert_eq!(data.item_users(2), (&[0u32][..], &[1.5f32][..]));
        assert_eq!(data.item_users(3).0.len(), 0);
    }

    #[test]
    fn empty_matrix() {
        let data = Interactions::from_triples(0, 0, []);
        assert_eq!((data.users(), data.items(), data.nnz()), (0, 0, 0));
    }

    #[test]
    #[should_panic(expected = "item row 4 out of range")]
    fn out_of_range_item_panics() {
        let _ = Interactions::from_triples(1, 4, [(0, 4, 1.0)]);
    }
}
