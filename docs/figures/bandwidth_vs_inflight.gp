# Drawn by `kvtier report`; redraw from this folder with: gnuplot bandwidth_vs_inflight.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'bandwidth_vs_inflight.svg'
set termoption noenhanced
set title 'Cold read bandwidth against bytes in flight'
set xlabel 'bytes in flight (MiB)'
set ylabel 'GB/s (1e9 bytes/s)'
set grid
set key below
set yrange [0:*]
set logscale x 2
$d0 << EOD
2 0.967491
8 0.859615
32 1.20183
128 1.85251
256 1.85986
EOD
$d1 << EOD
2 1.96836
8 0.428212
32 1.80309
128 2.03553
256 2.07286
EOD
$d2 << EOD
32 0.64345
64 0.860501
128 1.07756
256 1.27527
512 1.73148
EOD
$d3 << EOD
32 1.07294
64 1.10156
128 1.15425
256 1.28017
512 1.84254
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'kvtier: file:///work/bench-tmp, 2.00 MiB chunks', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 2 title 'fio (same depth): file:///work/bench-tmp, 2.00 MiB chunks', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks'
