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
2 3.57569
8 3.60532
32 3.73211
128 3.9266
256 3.93005
EOD
$d1 << EOD
2 3.29003
8 3.55649
32 4.04451
128 4.21072
256 4.16185
EOD
$d2 << EOD
32 4.07707
64 4.23272
128 4.15718
256 4.17734
512 4.15753
EOD
$d3 << EOD
32 3.83869
64 3.94444
128 4.36534
256 4.36534
512 4.35207
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'kvtier: file:///work/bench-tmp, 2.00 MiB chunks', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 2 title 'fio (same depth): file:///work/bench-tmp, 2.00 MiB chunks', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'kvtier: file:///work/bench-tmp, 32.00 MiB chunks', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 2 title 'fio (same depth): file:///work/bench-tmp, 32.00 MiB chunks'
