//! Vectors: latent and content embeddings of users and items.
