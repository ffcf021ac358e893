"""What a node has: its CPU and ISA (hardware), the Intel stack (intel,
oneccl, versions), how fast its matmuls run (matmul), and the precision
that follows (precision)."""
