# Drawn by `kvtier report`; redraw from this folder with: gnuplot bandwidth_vs_chunk.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'bandwidth_vs_chunk.svg'
set termoption noenhanced
set title 'Best cold read bandwidth against chunk size'
set xlabel 'chunk size (MiB)'
set ylabel 'GB/s (1e9 bytes/s)'
set grid
set key below
set yrange [0:*]
set logscale x 2
$d0 << EOD
2 3.93005
32 4.23272
EOD
$d1 << EOD
2 4.21072
32 4.36534
EOD
$d2 << EOD
2 1.6269
32 1.3755
EOD
$d3 << EOD
32 19.6795
EOD
$d4 << EOD
32 13.8688
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'kvtier best: file:///work/bench-tmp', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 2 title 'fio best: file:///work/bench-tmp', \
     $d2 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 2 title 'serial pread: file:///work/bench-tmp', \
     $d3 using 1:2 with linespoints lw 2 pt 7 lc 3 dt 1 title 'kvtier best: mem://', \
     $d4 using 1:2 with linespoints lw 2 pt 7 lc 5 dt 1 title 'kvtier best: mem://?verify=true'
