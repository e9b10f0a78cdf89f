"""Contrastive pretraining losses and ConSERT augmentations: pure functions on embedding tensors."""
from minbert.losses.augmentations import embedding_dropout, feature_cutoff, token_cutoff, token_shuffle
from minbert.losses.consert import nt_xent_loss
from minbert.losses.contrastive_tension import contrastive_tension_loss
from minbert.losses.mnrl import multiple_negatives_ranking_loss
from minbert.losses.self_guided import (ProjectionHead, l2_regulariser, sample_layer_views, self_guided_base_loss,
                                        self_guided_opt1_loss, self_guided_opt2_loss, self_guided_opt3_loss)
from minbert.losses.simcse import quora_simcse_loss, simcse_loss
from minbert.losses.similarity import cosine_similarity_matrix
